/**
 * The stored-bytes column of `usage_daily` (SQLite migration 028, PostgreSQL 030) on a store that already
 * counted usage: the day's invocations and compute time are kept, its stored bytes start at 0, and the
 * quota check then reads them.
 */
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { DatabaseSync } from "node:sqlite";
import { test } from "node:test";
import pg from "pg";
import type { Storage } from "../../src/storage/port.ts";
import { openPostgresStorage } from "../../src/storage/postgres/driver.ts";
import { openSqliteStorage } from "../../src/storage/sqlite/driver.ts";
import { dropSchema, freshSchema, testPgUrl } from "../pg-schemas.ts";

const day = "2026-05-20";
const limits = { invocations: 100, computeMs: 100_000, storedBytes: 1000 };

/** The usage row a store before the migration held, written as that store's schema had it. */
const before = [
  "ALTER TABLE usage_daily DROP COLUMN stored_bytes",
  "INSERT INTO usage_daily (user_id, day, invocations, compute_ms) VALUES ('u_old', '2026-05-20', 7, 1234)",
];

async function assertMigrated(store: Storage): Promise<void> {
  assert.deepEqual(await store.getUsage("u_old", day), { invocations: 7, computeMs: 1234, storedBytes: 0 });
  assert.equal(await store.reserveInvocation("u_old", day, limits), true);
  await store.addUsage("u_old", day, { invocations: 0, computeMs: 0, storedBytes: 1000 });
  assert.deepEqual(await store.getUsage("u_old", day), {
    invocations: 8,
    computeMs: 1234,
    storedBytes: 1000,
  });
  assert.equal(await store.reserveInvocation("u_old", day, limits), false, "the stored bytes are used up");
}

test("sqlite: migration 028 keeps a day's usage and starts its stored bytes at 0", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  await openSqliteStorage({ dataDir }).close();
  const db = new DatabaseSync(path.join(dataDir, "fount.db"));
  for (const sql of before) db.exec(sql);
  db.exec("DELETE FROM schema_migrations WHERE version = 28");
  db.close();
  const migrated = openSqliteStorage({ dataDir });
  try {
    await assertMigrated(migrated);
  } finally {
    await migrated.close();
  }
});

test("postgres: migration 030 keeps a day's usage and starts its stored bytes at 0", async () => {
  const schema = freshSchema();
  try {
    await (await openPostgresStorage({ url: testPgUrl, schema, poolSize: 1 })).close();
    const client = new pg.Client({ connectionString: testPgUrl });
    await client.connect();
    try {
      await client.query(`SET search_path TO "${schema}"`);
      for (const sql of before) await client.query(sql);
      await client.query("DELETE FROM schema_migrations WHERE version = 30");
    } finally {
      await client.end();
    }
    const migrated = await openPostgresStorage({ url: testPgUrl, schema, poolSize: 1 });
    try {
      await assertMigrated(migrated);
    } finally {
      await migrated.close();
    }
  } finally {
    await dropSchema(schema);
  }
});
