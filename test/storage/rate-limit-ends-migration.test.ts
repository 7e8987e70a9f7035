/**
 * The end of each rate-limit window (SQLite migration 030, PostgreSQL 032) on a store that already
 * counted: an API window ends a minute after its start, and a backfill count, stored an hour ahead of the
 * clock before, gets its true start back, so that the owner's hour goes on as it was. A row a node of the
 * version before writes during a rolling upgrade (no end) is pruned as that version would, after a minute.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import type { Storage } from "../../src/storage/port.ts";
import { remigratePostgres, remigrateSqlite } from "./remigrate.ts";

/** Rows as the store before the migration held them: an API minute, and a backfill hour counted at 1,000 s. */
const back = [
  "ALTER TABLE rate_limits DROP COLUMN window_ends_ms",
  "INSERT INTO rate_limits (key, window_start_ms, count) VALUES ('ip:127.0.0.1', 1000000, 5)",
  "INSERT INTO rate_limits (key, window_start_ms, count) VALUES ('backfill:u_old', 4600000, 10)",
];

/** An API window a node of the version before counts, beside the migrated store. */
const after = ["INSERT INTO rate_limits (key, window_start_ms, count) VALUES ('ip:10.0.0.1', 1030000, 2)"];

async function assertMigrated(store: Storage): Promise<void> {
  assert.deepEqual(await store.countRateLimitHit("backfill:u_old", 1_000_500, 3_600_000), {
    count: 11,
    windowStartMs: 1_000_000,
  });
  assert.equal(await store.pruneRateLimits(1_059_999), 0, "nothing ended yet");
  assert.equal(await store.pruneRateLimits(1_060_000), 1, "the API's minute ended");
  assert.equal(await store.pruneRateLimits(1_089_999), 0, "the older node's minute has not");
  assert.equal(await store.pruneRateLimits(1_090_000), 1, "now it has");
  assert.equal(await store.pruneRateLimits(4_599_999), 0, "the backfill hour is kept to its end");
  assert.equal(await store.pruneRateLimits(4_600_000), 1, "and forgotten then");
}

test("sqlite: migration 030 gives each rate-limit window its end, and a backfill hour its true start", () =>
  remigrateSqlite({ version: 30, back, after, check: assertMigrated }));

test("postgres: migration 032 gives each rate-limit window its end, and a backfill hour its true start", () =>
  remigratePostgres({ version: 32, back, after, check: assertMigrated }));
