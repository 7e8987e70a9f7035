/**
 * The event pruner on real stores, SQLite and PostgreSQL: what it remembers of a window's size never
 * falls below what the window holds (so a window is not left over its limit until the next sweep), and
 * what others delete from a window while it prunes never makes it delete a kept event.
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
import type { Storage, StorageOps } from "../../../src/storage/port.ts";
import { openSqliteStorage } from "../../../src/storage/sqlite/driver.ts";
import { openTestPostgres } from "../../pg-schemas.ts";

const hour = 3_600_000;
const settings: RetentionSettings = {
  defaults: { events: 10, days: undefined },
  max: { events: 1000, days: 365 },
  freeMax: { events: 1000, days: undefined },
  logs: { events: 10, days: undefined },
  errors: { events: 10, days: undefined },
  // No pass but the first and those the test runs.
  pruneIntervalMs: hour,
  sweepIntervalMs: hour,
  pruneBatch: 5,
  pruneRate: 1_000_000,
};
const clock = { now: () => Date.now() };
// A workflow-less, source-less emitter: the instance's defaults apply (10 a channel).
const emitterId = "x_window";

const drivers: Array<[string, () => Promise<Storage>]> = [
  ["sqlite", async () => openSqliteStorage({ dataDir: mkdtempSync(path.join(os.tmpdir(), "fount-prune-")) })],
  ["postgres", () => openTestPostgres()],
];

/**
 * A store, a bus, a pruner over `seen` (the store with the test's own steps put into some operations),
 * started once the window holds `first` events and its first sweep has brought it down to 10.
 */
async function prunerOn(open: () => Promise<Storage>, first: number) {
  const store = await open();
  const bus = new Bus();
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
  const seen: StorageOps = Object.create(store);
  const errors: unknown[] = [];
  const pruner = new EventPruner({
    store: seen,
    retention: new Retention(settings, clock),
    bus,
    clock,
    onError: (err) => errors.push(err),
  });
  await storeEvents(first);
  pruner.start();
  for (let i = 0; (await store.countEvents(emitterId, "")) !== 10; i++) {
    assert.ok(i < 1000, "the first sweep pruned the window");
    await new Promise((r) => setTimeout(r, 10));
  }
  const kept = async () =>
    (await store.listEvents(emitterId, { channel: "", limit: 100 })).items.map((e) => e.idSeq);
  const close = async () => {
    await pruner.stop();
    await store.close();
    assert.deepEqual(errors, []);
  };
  return { store, seen, pruner, storeEvents, kept, close, next: () => seq };
}

for (const [driver, open] of drivers) {
  test(`${driver}: events stored while a visit prunes are counted at the next visit`, async () => {
    const p = await prunerOn(open, 13);
    try {
      // Events stored after the visit looked at the window and before it ends, as a busy channel's are.
      let arriving = 0;
      p.seen.eventWindowCut = async (...args) => {
        const cut = await p.store.eventWindowCut(...args);
        await p.storeEvents(arriving);
        arriving = 0;
        return cut;
      };
      await p.storeEvents(3);
      arriving = 5;
      assert.equal(await p.pruner.pass(), 3);
      assert.equal(await p.store.countEvents(emitterId, ""), 15);
      // Touched by the five: the visit looks again rather than trust a size taken before them.
      assert.equal(await p.pruner.pass(), 5);
      assert.deepEqual(
        await p.kept(),
        Array.from({ length: 10 }, (_, i) => p.next() - 1 - i),
      );
    } finally {
      await p.close();
    }
  });

  test(`${driver}: old events deleted by others while a visit prunes leave every kept event in place`, async () => {
    const p = await prunerOn(open, 13);
    try {
      // 30 in a window of 10; after the visit's first batch of 5, a range of 10 of the oldest is
      // deleted (the API's DELETE, another node's pruner): a visit that deleted the 20 it counted first
      // went on into the 10 it keeps.
      await p.storeEvents(20);
      const prune = p.seen.pruneEvents.bind(p.seen);
      let batches = 0;
      p.seen.pruneEvents = async (...args) => {
        const r = await prune(...args);
        if (++batches === 1) {
          const oldest = (await p.store.listEvents(emitterId, { channel: "", limit: 100 })).items.at(-1)!;
          const to = { ms: oldest.idMs, seq: oldest.idSeq + 9 };
          assert.equal(
            await p.store.deleteEvents(emitterId, { ms: oldest.idMs, seq: oldest.idSeq }, to, ""),
            10,
          );
        }
        return r;
      };
      assert.equal(await p.pruner.pass(), 10);
      assert.deepEqual(
        await p.kept(),
        Array.from({ length: 10 }, (_, i) => p.next() - 1 - i),
      );
    } finally {
      await p.close();
    }
  });
}
