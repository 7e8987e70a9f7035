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
import { Committer } from "../../../src/domain/events/committer.ts";
import { StoreUnavailableError } from "../../../src/storage/health.ts";
import { openSqliteStorage } from "../../../src/storage/sqlite/driver.ts";

const store = () => openSqliteStorage({ dataDir: mkdtempSync(path.join(os.tmpdir(), "fount-commit-")) });
const day = "2026-11-23";

test("jobs of one turn share a transaction; a failing one fails alone", async () => {
  const s = await store();
  const committer = new Committer(s);
  const add = (user: string) =>
    committer.submit(async (tx) => tx.addUsage(user, day, { invocations: 1, computeMs: 0, storedBytes: 0 }));
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
      await tx.addUsage(user, day, { invocations: 1, computeMs: 0, storedBytes: 0 });
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

/** Resolves to "pending" if `promise` has not settled within `ms`. */
async function within<T>(promise: Promise<T>, ms: number): Promise<T | "pending"> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<"pending">((resolve) => {
    timer = setTimeout(() => resolve("pending"), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** A committer on a fresh store that records the jobs of each transaction it commits. */
async function lingering(lingerMs: number, maxBatch?: number) {
  const s = await store();
  const batches: number[] = [];
  const committer = new Committer(s, { lingerMs, maxBatch, observe: (_ms, jobs) => batches.push(jobs) });
  const add = (user: string) =>
    committer.submit(async (tx) => {
      await tx.addUsage(user, day, { invocations: 1, computeMs: 0, storedBytes: 0 });
      return user;
    });
  return { s, committer, batches, add };
}

test("with lingerMs, a batch waits for an announced job and commits it in the same transaction", async () => {
  // Far longer than the checks below wait: the batch can only commit when the announced job arrives.
  const { s, committer, batches, add } = await lingering(60_000);
  const arrived = committer.expect();
  const first = add("u_a");
  assert.equal(await within(first, 200), "pending");
  const second = add("u_b");
  arrived();
  assert.deepEqual(await within(Promise.all([first, second]), 10_000), ["u_a", "u_b"]);
  assert.deepEqual(batches, [2]);
  await s.close();
});

test("with lingerMs, a batch commits at once when nothing is announced, or the announced job is given up", async () => {
  const { s, committer, batches, add } = await lingering(60_000);
  assert.equal(await within(add("u_a"), 10_000), "u_a");
  const givenUp = committer.expect();
  const second = add("u_b");
  assert.equal(await within(second, 200), "pending");
  givenUp();
  givenUp(); // a second call changes nothing
  assert.equal(await within(second, 10_000), "u_b");
  // Nothing is announced any more: the next batch does not wait.
  assert.equal(await within(add("u_c"), 10_000), "u_c");
  assert.deepEqual(batches, [1, 1, 1]);
  await s.close();
});

test("with lingerMs, a full batch commits without waiting, and a wait ends after lingerMs", async () => {
  const full = await lingering(60_000, 2);
  full.committer.expect();
  const first = full.add("u_a");
  assert.equal(await within(first, 200), "pending");
  // The second job fills the batch: the wait ends although the announced job never came.
  assert.deepEqual(await within(Promise.all([first, full.add("u_b")]), 10_000), ["u_a", "u_b"]);
  assert.deepEqual(full.batches, [2]);
  await full.s.close();

  const short = await lingering(50);
  short.committer.expect(); // never arrives
  const t0 = performance.now();
  assert.equal(await within(short.add("u_a"), 10_000), "u_a");
  assert.ok(performance.now() - t0 >= 45, "the batch waited for the announced job");
  await short.s.close();
});
