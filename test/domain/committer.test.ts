/**
 * Group commit on a real SQLite store: jobs submitted in one event-loop turn share a transaction, a
 * failing job fails alone, and each job sees the carried async-local values of its own submitter.
 */
import assert from "node:assert/strict";
import { AsyncLocalStorage } from "node:async_hooks";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { Committer } from "../../src/domain/committer.ts";
import { StoreUnavailableError } from "../../src/storage/health.ts";
import { openSqliteStorage } from "../../src/storage/sqlite/driver.ts";

const store = () => openSqliteStorage({ dataDir: mkdtempSync(path.join(os.tmpdir(), "fount-commit-")) });
const day = "2026-11-23";

test("jobs of one turn share a transaction; a failing one fails alone", async () => {
  const s = await store();
  const committer = new Committer(s);
  const add = (user: string) =>
    committer.submit(async (tx) => tx.addUsage(user, day, { invocations: 1, computeMs: 0 }));
  const results = await Promise.allSettled([
    add("u_a"),
    committer.submit(async () => {
      throw new Error("refused");
    }),
    add("u_b"),
  ]);
  assert.deepEqual(
    results.map((r) => r.status),
    ["fulfilled", "rejected", "fulfilled"],
  );
  assert.equal((await s.getUsage("u_a", day)).invocations, 1);
  assert.equal((await s.getUsage("u_b", day)).invocations, 1);
  await s.close();
});

test("a batch that finds the store unavailable fails every job at once, none retried alone", async () => {
  const s = await store();
  const committer = new Committer(s);
  let runs = 0;
  const add = (user: string) =>
    committer.submit(async (tx) => {
      runs++;
      await tx.addUsage(user, day, { invocations: 1, computeMs: 0 });
    });
  const results = await Promise.allSettled([
    add("u_a"),
    committer.submit(async () => {
      throw new StoreUnavailableError("connection lost");
    }),
    add("u_b"),
  ]);
  assert.deepEqual(
    results.map((r) => (r.status === "rejected" ? (r.reason as { code: string }).code : r.status)),
    ["store_unavailable", "store_unavailable", "store_unavailable"],
  );
  // Only the first job ran, once, in the batch: a lost store names no culprit to look for alone.
  assert.equal(runs, 1);
  assert.equal((await s.getUsage("u_a", day)).invocations, 0);
  await s.close();
});

test("each job sees the carried store values of its submitter, not those of its batch", async () => {
  const s = await store();
  const hops = new AsyncLocalStorage<{ hops: number }>();
  const other = new AsyncLocalStorage<string>();
  const committer = new Committer(s, { carried: [hops] });
  const seen = (label: string) =>
    committer.submit(async () => ({ label, hops: hops.getStore()?.hops, other: other.getStore() }));
  // All four land in one batch, which starts in the first submitter's context.
  const jobs = [
    hops.run({ hops: 3 }, () => seen("three")),
    seen("none"),
    hops.run({ hops: 7 }, () => other.run("not carried", () => seen("seven"))),
    hops.exit(() => seen("exited")),
  ];
  assert.deepEqual(await Promise.all(jobs), [
    { label: "three", hops: 3, other: undefined },
    { label: "none", hops: undefined, other: undefined },
    { label: "seven", hops: 7, other: undefined },
    { label: "exited", hops: undefined, other: undefined },
  ]);
  await s.close();
});
