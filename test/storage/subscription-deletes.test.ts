/**
 * Deleting a subscription with a large backlog, on both drivers: the delete takes one batch of its
 * pending deliveries and marks the rest, which no claim hands out, and `sweepDeletedSubscriptions`
 * deletes them a batch a transaction until none is left; another subscription's deliveries to the same
 * listener stay.
 */
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import type { Storage } from "../../src/storage/port.ts";
import { openSqliteStorage } from "../../src/storage/sqlite/driver.ts";
import { deliveryDeleteBatch } from "../../src/storage/subscription-deletes.ts";
import { openTestPostgres } from "../pg-schemas.ts";
import { deliveryFixtures } from "./delivery-contract.ts";

let counter = 0;
const unique = (prefix: string) => `${prefix}_${process.pid}x${++counter}`;
const { webhook, delivery } = deliveryFixtures(unique);

const drivers: Array<[string, () => Promise<Storage>]> = [
  ["sqlite", async () => openSqliteStorage({ dataDir: mkdtempSync(path.join(os.tmpdir(), "fount-store-")) })],
  ["postgres", () => openTestPostgres()],
];

for (const [driver, open] of drivers) {
  test(`${driver}: a deleted subscription's backlog is never claimed and is deleted a batch at a time`, async () => {
    const s = await open();
    try {
      const owner = unique("u");
      const hook = webhook(owner);
      await s.insertWebhook(hook);
      const base = { ownerId: owner, listenerId: hook.id, eventName: "", createdAt: 1 };
      const gone = await s.upsertSubscription({ id: unique("sub"), emitterId: unique("dc"), ...base });
      const kept = await s.upsertSubscription({ id: unique("sub"), emitterId: unique("dc"), ...base });
      const backlog = 2 * deliveryDeleteBatch + 10;
      const rows = Array.from({ length: backlog }, () => delivery(hook.id, { subscriptionId: gone.id }));
      for (let i = 0; i < rows.length; i += 1000) await s.insertDeliveries(rows.slice(i, i + 1000));
      const other = delivery(hook.id, { subscriptionId: kept.id, nextAttemptMs: 5000 });
      await s.insertDeliveries([other]);
      // One of the backlog in flight when the subscription goes: it goes with the delete.
      const claim = (nowMs: number) =>
        s.claimDeliveries({ nowMs, limit: 1, perListener: 100, claimToken: "run-1", exceptListeners: [] });
      const [inFlight] = await claim(2000);
      assert.equal(inFlight?.subscriptionId, gone.id);

      const removed = await s.transaction((tx) =>
        tx.deleteSubscriptions([owner], { emitterId: gone.emitterId, listenerId: hook.id, eventName: "" }),
      );
      assert.deepEqual(
        removed.map((r) => r.id),
        [gone.id],
      );
      assert.equal(await s.getDelivery(inFlight!.id), undefined, "the claimed one goes at once");
      const left = (await s.countPendingDeliveries(10_000)).pending;
      assert.equal(left, 1 + backlog - 1 - deliveryDeleteBatch, "one batch went with the delete");

      // None of what is left is handed out: only the other subscription's delivery, when due.
      const claimed = await s.claimDeliveries({
        nowMs: 10_000,
        limit: 100,
        perListener: 100,
        claimToken: "run-2",
        exceptListeners: [],
      });
      assert.deepEqual(
        claimed.map((d) => d.id),
        [other.id],
      );

      let sweeps = 0;
      while (await s.transaction((tx) => tx.sweepDeletedSubscriptions())) sweeps++;
      assert.equal(sweeps, 2, "a batch a transaction");
      assert.equal((await s.countPendingDeliveries(10_000)).pending, 1);
      assert.ok(await s.getDelivery(other.id), "another subscription's delivery stays");
      assert.equal(await s.transaction((tx) => tx.sweepDeletedSubscriptions()), false);
    } finally {
      await s.close();
    }
  });
}
