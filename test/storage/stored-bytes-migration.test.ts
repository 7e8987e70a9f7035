/**
 * The stored-bytes column of `usage_daily` (SQLite migration 028, PostgreSQL 030) on a store that already
 * counted usage: the day's invocations and compute time are kept, its stored bytes start at 0, and the
 * quota check then reads them.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import type { Storage } from "../../src/storage/port.ts";
import { remigratePostgres, remigrateSqlite } from "./remigrate.ts";

const day = "2026-05-20";
const limits = { invocations: 100, computeMs: 100_000, storedBytes: 1000 };

/** The usage row a store before the migration held, written as that store's schema had it. */
const back = [
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

test("sqlite: migration 028 keeps a day's usage and starts its stored bytes at 0", () =>
  remigrateSqlite({ version: 28, back, check: assertMigrated }));

test("postgres: migration 030 keeps a day's usage and starts its stored bytes at 0", () =>
  remigratePostgres({ version: 30, back, check: assertMigrated }));
