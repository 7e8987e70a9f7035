/**
 * The ledger's usual settlements share a committer job: those that arrive before the job runs are
 * written in it, each is published on the bus once committed and its `settle` resolves then; a delivery
 * deleted meanwhile gets no attempt row; and when the job cannot commit, every settlement waiting on it
 * fails (none is left hanging), while the next ones commit again; one settlement the store refuses fails
 * alone.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { DeliveryLedger } from "../../src/delivery/ledger.ts";
import { settlementOf } from "../../src/delivery/settlement.ts";
import { Bus, type EventMap } from "../../src/domain/bus.ts";
import { Committer } from "../../src/domain/events/committer.ts";
import { EventRecorder } from "../../src/domain/events/recorder.ts";
import type { Delivery } from "../../src/domain/types.ts";
import type { Storage } from "../../src/storage/port.ts";
import { openSqliteStorage } from "../../src/storage/sqlite/driver.ts";
import { deliveryFixtures } from "../storage/delivery-contract.ts";

let n = 0;
const { delivery } = deliveryFixtures((prefix) => `${prefix}_ledger${++n}`);

function setUp(
  store: Storage = openSqliteStorage({ dataDir: mkdtempSync(path.join(os.tmpdir(), "ledger-")) }),
) {
  const jobs: number[] = [];
  const committer = new Committer(store, { observe: (_ms, count) => jobs.push(count) });
  const bus = new Bus();
  const settled: Array<EventMap["delivery.settled"][0]> = [];
  bus.on("delivery.settled", (s) => settled.push(s));
  const ledger = new DeliveryLedger({ committer, recorder: new EventRecorder(), bus });
  const succeeded = (d: Delivery) =>
    settlementOf(
      d,
      { kind: "succeeded", statusCode: 200, response: "ok" },
      { startedMs: 2000, durationMs: 3, nowMs: 2005, random: () => 0.5 },
    );
  return { store, committer, ledger, settled, jobs, succeeded };
}

test("the usual settlements of one turn commit in one job, each published once committed", async () => {
  const { store, ledger, settled, jobs, succeeded } = setUp();
  try {
    const ds = Array.from({ length: 10 }, () => delivery("wh_1"));
    await store.insertDeliveries(ds);
    const gone = ds[9]!;
    await store.transaction(async (tx) => {
      await tx.cancelDeliveries("wh_1", [gone.id]);
    });
    const pending = ds.map((d) => ledger.settle(d, succeeded(d)));
    assert.equal(settled.length, 0, "nothing is published before the commit");
    await Promise.all(pending);
    assert.deepEqual(jobs, [1], "one transaction, one job for the ten settlements");
    assert.deepEqual(
      settled.map((s) => s.deliveryId),
      ds.map((d) => d.id),
      "each published once, in the order settled (the deleted one too: its attempt was made)",
    );
    for (const d of ds.slice(0, 9)) assert.equal((await store.getDelivery(d.id))?.status, "succeeded");
    assert.equal(await store.getDelivery(gone.id), undefined, "a deleted delivery stays deleted");
    const attempts = await store.listDeliveryAttempts(ds.map((d) => d.id));
    assert.deepEqual(
      attempts.map((a) => a.deliveryId).sort(),
      ds
        .slice(0, 9)
        .map((d) => d.id)
        .sort(),
      "an attempt row for each delivery that still exists",
    );

    // Later settlements get a job of their own.
    const next = delivery("wh_1");
    await store.insertDeliveries([next]);
    await ledger.settle(next, succeeded(next));
    assert.deepEqual(jobs, [1, 1]);
    assert.equal(settled.length, 11);
  } finally {
    await store.close();
  }
});

test("when the job cannot commit, every settlement waiting on it fails, and the next ones commit", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "ledger-"));
  const real = openSqliteStorage({ dataDir });
  let failing = true;
  // The real store, whose transactions fail while `failing` (as a lost disk would make them).
  const store: Storage = {
    ...real,
    transaction: (fn) => (failing ? Promise.reject(new Error("disk I/O error")) : real.transaction(fn)),
  };
  const { ledger, settled, succeeded } = setUp(store);
  try {
    const ds = Array.from({ length: 5 }, () => delivery("wh_1"));
    await real.insertDeliveries(ds);
    const results = await Promise.allSettled(ds.map((d) => ledger.settle(d, succeeded(d))));
    assert.deepEqual(
      results.map((r) => r.status),
      ds.map(() => "rejected"),
    );
    assert.equal(settled.length, 0, "nothing published");
    for (const d of ds) assert.equal((await real.getDelivery(d.id))?.status, "pending");

    failing = false;
    await Promise.all(ds.map((d) => ledger.settle(d, succeeded(d))));
    assert.equal(settled.length, 5);
    for (const d of ds) assert.equal((await real.getDelivery(d.id))?.status, "succeeded");
  } finally {
    await real.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test("a settlement the store refuses fails alone: the others of its job commit", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "ledger-"));
  const real = openSqliteStorage({ dataDir });
  const ds = Array.from({ length: 4 }, () => delivery("wh_1"));
  const bad = ds[1]!;
  // The real store, refusing to write one delivery's result (as PostgreSQL refuses a value it cannot hold).
  const store: Storage = {
    ...real,
    transaction: (fn) =>
      real.transaction((tx) =>
        fn({
          ...tx,
          settleDelivery: (id, patch, attempt) =>
            id === bad.id
              ? Promise.reject(new Error("injected: refused"))
              : tx.settleDelivery(id, patch, attempt),
        }),
      ),
  };
  const { ledger, settled, succeeded } = setUp(store);
  try {
    await real.insertDeliveries(ds);
    const results = await Promise.allSettled(ds.map((d) => ledger.settle(d, succeeded(d))));
    assert.deepEqual(
      results.map((r) => r.status),
      ds.map((d) => (d === bad ? "rejected" : "fulfilled")),
    );
    assert.deepEqual(
      settled.map((s) => s.deliveryId),
      ds.filter((d) => d !== bad).map((d) => d.id),
    );
    for (const d of ds)
      assert.equal((await real.getDelivery(d.id))?.status, d === bad ? "pending" : "succeeded");
  } finally {
    await real.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
