/**
 * The end of each rate-limit window (SQLite migration 030, PostgreSQL 032) on a store that already
 * counted: an API window ends a minute after its start, and a backfill count, stored an hour ahead of the
 * clock before, gets its true start back, so that the owner's hour goes on as it was.
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

/** Rows as the store before the migration held them: an API minute, and a backfill hour counted at 1,000 s. */
const before = [
  "ALTER TABLE rate_limits DROP COLUMN window_ends_ms",
  "INSERT INTO rate_limits (key, window_start_ms, count) VALUES ('ip:127.0.0.1', 1000000, 5)",
  "INSERT INTO rate_limits (key, window_start_ms, count) VALUES ('backfill:u_old', 4600000, 10)",
];

async function assertMigrated(store: Storage): Promise<void> {
  assert.deepEqual(await store.countRateLimitHit("backfill:u_old", 1_000_500, 3_600_000), {
    count: 11,
    windowStartMs: 1_000_000,
  });
  assert.equal(await store.pruneRateLimits(1_059_999), 0, "nothing ended yet");
  assert.equal(await store.pruneRateLimits(1_060_000), 1, "the API's minute ended");
  assert.equal(await store.pruneRateLimits(4_599_999), 0, "the backfill hour is kept to its end");
  assert.equal(await store.pruneRateLimits(4_600_000), 1, "and forgotten then");
}

test("sqlite: migration 030 gives each rate-limit window its end, and a backfill hour its true start", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  await openSqliteStorage({ dataDir }).close();
  const db = new DatabaseSync(path.join(dataDir, "fount.db"));
  for (const sql of before) db.exec(sql);
  db.exec("DELETE FROM schema_migrations WHERE version = 30");
  db.close();
  const migrated = openSqliteStorage({ dataDir });
  try {
    await assertMigrated(migrated);
  } finally {
    await migrated.close();
  }
});

test("postgres: migration 032 gives each rate-limit window its end, and a backfill hour its true start", async () => {
  const schema = freshSchema();
  try {
    await (await openPostgresStorage({ url: testPgUrl, schema, poolSize: 1 })).close();
    const client = new pg.Client({ connectionString: testPgUrl });
    await client.connect();
    try {
      await client.query(`SET search_path TO "${schema}"`);
      for (const sql of before) await client.query(sql);
      await client.query("DELETE FROM schema_migrations WHERE version = 32");
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
