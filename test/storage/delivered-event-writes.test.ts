/**
 * What a delivered event writes (migration 023 of each driver; issue 29): its first attempt is kept in the
 * delivery's own row, so it writes no row of `delivery_attempts` (later attempts still do, and an attempt
 * stored there before the migration reads back as it was, in order with the ones after it), and a
 * webhook's delivery does not enter the subscription index, which only deliveries to sources and replays
 * need.
 */
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { DatabaseSync } from "node:sqlite";
import { test } from "node:test";
import pg from "pg";
import type { DeliveryAttempt } from "../../src/domain/types.ts";
import type { DeliveryPatch, Storage } from "../../src/storage/port.ts";
import { openPostgresStorage } from "../../src/storage/postgres/driver.ts";
import { openSqliteStorage } from "../../src/storage/sqlite/driver.ts";
import { dropSchema, freshSchema, testPgUrl } from "../pg-schemas.ts";
import { deliveryFixtures } from "./delivery-contract.ts";

let counter = 0;
const { delivery } = deliveryFixtures((prefix) => `${prefix}_first${++counter}`);

const patch = (attempts: number, status: DeliveryPatch["status"]): DeliveryPatch => ({
  status,
  attempts,
  roundAttempts: attempts,
  nextAttemptMs: status === "pending" ? 9000 : null,
  lastStatusCode: status === "succeeded" ? 200 : 503,
  lastError: status === "succeeded" ? null : "HTTP 503",
  lastDurationMs: 4,
  updatedMs: 5000 + attempts,
});

const attempt = (deliveryId: string, n: number, ok: boolean): DeliveryAttempt => ({
  deliveryId,
  n,
  startedMs: 4000 + n,
  durationMs: 4,
  statusCode: ok ? 200 : 503,
  error: ok ? null : "HTTP 503",
  response: ok ? `ok ${"é".repeat(600)}` : "busy",
  outcome: ok ? "succeeded" : "retry",
  detail: {
    url: "https://example.com/hook",
    requestHeaders: { "webhook-timestamp": "4", "webhook-signature": `v1,sig${n}=` },
    responseHeaders: { "content-type": "text/plain", "set-cookie": ["a=1", "b=2"] },
    responseTruncated: false,
    errorKind: ok ? null : "http",
  },
});

/** The store's rows of `delivery_attempts` for `ids`, by a query of the driver's own SQL. */
type CountRows = (ids: string[]) => Promise<number>;

async function firstInRowLaterApart(s: Storage, attemptRows: CountRows): Promise<void> {
  const once = delivery("wh_first");
  const twice = delivery("wh_first");
  await s.insertDeliveries([once, twice]);
  const a1 = attempt(once.id, 1, true);
  const b1 = attempt(twice.id, 1, false);
  await s.transaction(async (tx) => {
    await tx.settleDelivery(once.id, patch(1, "succeeded"), a1);
    await tx.settleDelivery(twice.id, patch(1, "pending"), b1);
  });
  assert.equal(
    await attemptRows([once.id, twice.id]),
    0,
    "first attempts are kept in their deliveries' rows",
  );
  const b2 = attempt(twice.id, 2, true);
  await s.transaction(async (tx) => tx.settleDelivery(twice.id, patch(2, "succeeded"), b2));
  assert.equal(await attemptRows([twice.id]), 1, "a second attempt is a row of its own");
  assert.deepEqual(await s.listDeliveryAttempts([twice.id, once.id]), [a1, b1, b2].sort(byDelivery));
  // The lists read the start of each answer only, in characters, as for the attempts kept apart.
  const listed = await s.listDeliveryAttempts([once.id], 10);
  assert.equal(listed[0]?.response, a1.response?.slice(0, 10));
  assert.equal((await s.getDelivery(once.id))?.status, "succeeded");
}

const byDelivery = (a: DeliveryAttempt, b: DeliveryAttempt) =>
  a.deliveryId < b.deliveryId ? -1 : a.deliveryId > b.deliveryId ? 1 : a.n - b.n;

/** An attempt as a store before migration 023 kept it, in `delivery_attempts`. */
const oldAttemptSql = (deliveryId: string, placeholders: string[]) =>
  `INSERT INTO delivery_attempts (delivery_id, n, started_ms, duration_ms, status_code, error, response, outcome, url,
     request_headers, response_headers, response_truncated, error_kind)
   VALUES ('${deliveryId}', 1, 4001, 4, 503, 'HTTP 503', 'busy', 'retry', 'https://example.com/hook',
     '{"webhook-timestamp":"4","webhook-signature":"v1,sig1="}', '{"content-type":"text/plain","set-cookie":["a=1","b=2"]}',
     ${placeholders[0]}, 'http')`;

/** The rows of `delivery_attempts` for `ids` in the SQLite file of `dataDir`, read on a connection of its own. */
function sqliteAttemptRows(dataDir: string): CountRows {
  return async (ids) => {
    const db = new DatabaseSync(path.join(dataDir, "fount.db"), { readOnly: true });
    try {
      const row = db
        .prepare(
          `SELECT count(*) AS n FROM delivery_attempts WHERE delivery_id IN (${ids.map(() => "?").join(", ")})`,
        )
        .get(...ids) as { n: number };
      return row.n;
    } finally {
      db.close();
    }
  };
}

test("sqlite: a delivered event's first attempt is kept in its row, later attempts apart, read back in order", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-first-"));
  const s = openSqliteStorage({ dataDir });
  try {
    await firstInRowLaterApart(s, sqliteAttemptRows(dataDir));
  } finally {
    await s.close();
  }
});

test("sqlite: migration 023 keeps a first attempt stored before it, read in order with the attempts after it", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-first-"));
  const before = openSqliteStorage({ dataDir });
  const d = delivery("wh_first");
  await before.insertDeliveries([d]);
  await before.close();
  // Back to the store before migration 023, with the first attempt in `delivery_attempts` as it kept them.
  const db = new DatabaseSync(path.join(dataDir, "fount.db"));
  db.exec(`ALTER TABLE deliveries DROP COLUMN first_attempt; DELETE FROM schema_migrations WHERE version = 23;
    UPDATE deliveries SET status = 'pending', attempts = 1, round_attempts = 1 WHERE id = '${d.id}';
    ${oldAttemptSql(d.id, ["0"])}`);
  db.close();
  const s = openSqliteStorage({ dataDir });
  try {
    await laterAttemptAfterOld(s, d.id);
  } finally {
    await s.close();
  }
});

test("sqlite: a webhook's pending delivery is not in the subscription index; a source's and a replay's are", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-first-"));
  const s = openSqliteStorage({ dataDir });
  try {
    await s.insertDeliveries([
      delivery("wh_first", { claimedBy: "node-1", claimedUntilMs: 50_000 }),
      delivery("wh_first"),
      delivery("dc_first"),
      delivery("wh_first", { subscriptionId: "rpl_first" }),
    ]);
    const db = new DatabaseSync(path.join(dataDir, "fount.db"), { readOnly: true });
    try {
      const cells = db
        .prepare(
          "SELECT sum(ncell) AS n FROM dbstat WHERE name = 'deliveries_subscription' AND pagetype = 'leaf'",
        )
        .get() as { n: number };
      assert.equal(cells.n, 2);
    } finally {
      db.close();
    }
  } finally {
    await s.close();
  }
});

/** After the migration: the old first attempt reads back as it was, and the second goes apart after it. */
async function laterAttemptAfterOld(s: Storage, id: string): Promise<void> {
  const old = attempt(id, 1, false);
  assert.deepEqual(await s.listDeliveryAttempts([id]), [old]);
  const second = attempt(id, 2, true);
  await s.transaction(async (tx) => tx.settleDelivery(id, patch(2, "succeeded"), second));
  assert.deepEqual(await s.listDeliveryAttempts([id]), [old, second]);
}

/** A fresh schema's store, with a client of its own for the checks; both closed and the schema dropped after. */
async function withPostgres(
  fn: (s: Storage, client: pg.Client, schema: string) => Promise<void>,
): Promise<void> {
  const schema = freshSchema();
  const client = new pg.Client({ connectionString: testPgUrl });
  await client.connect();
  try {
    const s = await openPostgresStorage({ url: testPgUrl, schema, poolSize: 2 });
    try {
      await fn(s, client, schema);
    } finally {
      await s.close();
    }
  } finally {
    await client.end();
    await dropSchema(schema);
  }
}

test("postgres: a delivered event's first attempt is kept in its row, later attempts apart, read back in order", async () => {
  await withPostgres(async (s, client, schema) => {
    await firstInRowLaterApart(s, async (ids) => {
      const { rows } = await client.query(
        `SELECT count(*)::int AS n FROM "${schema}".delivery_attempts WHERE delivery_id = ANY($1::text[])`,
        [ids],
      );
      return rows[0].n as number;
    });
  });
});

test("postgres: migration 023 keeps a first attempt stored before it, read in order with the attempts after it", async () => {
  await withPostgres(async (s, client, schema) => {
    const d = delivery("wh_first");
    await s.insertDeliveries([d]);
    await s.close();
    await client.query(`SET search_path TO "${schema}"`);
    await client.query(`ALTER TABLE deliveries DROP COLUMN first_attempt; DELETE FROM schema_migrations WHERE version = 23;
      UPDATE deliveries SET status = 'pending', attempts = 1, round_attempts = 1 WHERE id = '${d.id}';
      ${oldAttemptSql(d.id, ["false"])}`);
    const migrated = await openPostgresStorage({ url: testPgUrl, schema, poolSize: 2 });
    try {
      await laterAttemptAfterOld(migrated, d.id);
    } finally {
      await migrated.close();
    }
  });
});
