/**
 * The event pruner on a real SQLite store: what it remembers of a window's size between visits never
 * falls below what the window holds, so a window is never left over its limit until the next sweep.
 */
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import type { RetentionSettings } from "../../../src/config.ts";
import { Bus } from "../../../src/domain/bus.ts";
import { EventPruner } from "../../../src/domain/events/pruner.ts";
import { Retention } from "../../../src/domain/events/retention.ts";
import type { EventRecord } from "../../../src/domain/types.ts";
import type { StorageOps } from "../../../src/storage/port.ts";
import { openSqliteStorage } from "../../../src/storage/sqlite/driver.ts";

const hour = 3_600_000;
const settings: RetentionSettings = {
  defaults: { events: 10, days: undefined },
  max: { events: 1000, days: 365 },
  logs: { events: 10, days: undefined },
  errors: { events: 10, days: undefined },
  // No pass but the first and those the test runs.
  pruneIntervalMs: hour,
  sweepIntervalMs: hour,
  pruneBatch: 100,
  pruneRate: 1_000_000,
};
const clock = { now: () => Date.now() };

test("events stored while a visit counts and deletes are counted at the next visit", async () => {
  const store = await openSqliteStorage({ dataDir: mkdtempSync(path.join(os.tmpdir(), "fount-prune-")) });
  const bus = new Bus();
  // A workflow-less, source-less emitter: the instance's defaults apply (10 a channel).
  const emitterId = "x_window";
  let seq = 0;
  const storeEvents = async (n: number) => {
    for (let i = 0; i < n; i++) {
      const e: EventRecord = {
        emitterId,
        channel: "",
        id: `1000-${seq}`,
        idMs: 1000,
        idSeq: seq++,
        indexedAtMs: 1000,
        event: { i: seq },
        meta: { emit_id: `e${seq}`, name: "event", emitter_id: emitterId },
      };
      await store.insertEvent(e);
      bus.emit("event.stored", e);
    }
  };
  // Events stored after the count is taken and before the visit ends, as a busy channel's are.
  let afterCount = 0;
  const seen: StorageOps = Object.create(store);
  seen.countEvents = async (id, channel) => {
    const n = await store.countEvents(id, channel);
    const now = afterCount;
    afterCount = 0;
    await storeEvents(now);
    return n;
  };
  const errors: unknown[] = [];
  const pruner = new EventPruner({
    store: seen,
    retention: new Retention(settings, clock),
    bus,
    clock,
    onError: (err) => errors.push(err),
  });
  try {
    await storeEvents(13);
    pruner.start();
    // The first pass sweeps every window.
    for (let i = 0; (await store.countEvents(emitterId, "")) !== 10; i++) {
      assert.ok(i < 1000, "the first sweep pruned the window");
      await new Promise((r) => setTimeout(r, 10));
    }
    await storeEvents(3);
    afterCount = 5;
    assert.equal(await pruner.pass(), 3);
    assert.equal(await store.countEvents(emitterId, ""), 15);
    // Touched by the five: the visit counts again rather than trust a size taken before them.
    assert.equal(await pruner.pass(), 5);
    assert.equal(await store.countEvents(emitterId, ""), 10);
    assert.deepEqual(errors, []);
  } finally {
    await pruner.stop();
    await store.close();
  }
});
