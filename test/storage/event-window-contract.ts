/**
 * The storage contract of event windows (issue 28, retention): a channel's events are appended, listed
 * within their window (its newest `keep`, none older than `sinceMs`) whether the pruner has reached them
 * or not, counted exactly, and pruned oldest first in batches by count or by age. Registered by
 * `storageContract`, so every driver runs it.
 */
import assert from "node:assert/strict";
import type { EventRecord, EventWindow } from "../../src/domain/types.ts";
import type { Storage } from "../../src/storage/port.ts";
import type { WithStore } from "./delivery-contract.ts";

export function eventWindowContract(withStore: WithStore, unique: (prefix: string) => string): void {
  const fixtures = () => {
    const emitterId = unique("dc");
    const event = (n: number, channel = "", ms = 7): EventRecord => ({
      emitterId,
      channel,
      id: `${ms}-${n}`,
      idMs: ms,
      idSeq: n,
      indexedAtMs: ms,
      event: { n },
      meta: { emit_id: `e${n}`, name: channel, emitter_id: emitterId },
    });
    /** Every listed event's seq of a channel, oldest first, read a page of `limit` at a time. */
    const seqs = async (s: Storage, window?: EventWindow, channel = "", limit = 100) => {
      const all: number[] = [];
      let after: { ms: number; seq: number } | undefined;
      for (;;) {
        const page = await s.listEvents(emitterId, { channel, limit, after, window });
        all.push(...page.items.map((e) => e.idSeq));
        const last = page.items[page.items.length - 1];
        if (!last || page.items.length < limit) return all.reverse();
        after = { ms: last.idMs, seq: last.idSeq };
      }
    };
    return { emitterId, event, seqs };
  };
  const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

  withStore("a window's cut is its newest event past the newest `keep`, found from either end", async (s) => {
    const { emitterId, event } = fixtures();
    for (let n = 0; n < 10; n++) await s.insertEvent(event(n));
    await s.insertEvent(event(1000, "other"));
    // Few kept (found from the newest end on SQLite), most kept (from the oldest), all, and none.
    assert.deepEqual(await s.eventWindowCut(emitterId, "", 3), { ms: 7, seq: 6 });
    assert.deepEqual(await s.eventWindowCut(emitterId, "", 8), { ms: 7, seq: 1 });
    assert.equal(await s.eventWindowCut(emitterId, "", 10), undefined);
    assert.equal(await s.eventWindowCut(emitterId, "other", 1), undefined);
    assert.deepEqual(await s.eventWindowCut(emitterId, "", 0), { ms: 7, seq: 9 });
    // After a delete the cut counts what is left.
    assert.deepEqual(await s.pruneEvents(emitterId, "", 2), { deleted: 2, last: { ms: 7, seq: 1 } });
    assert.deepEqual(await s.eventWindowCut(emitterId, "", 3), { ms: 7, seq: 6 });
    assert.deepEqual(await s.eventWindowCut(emitterId, "", 7), { ms: 7, seq: 2 });
    assert.equal(await s.eventWindowCut(emitterId, "", 8), undefined);
  });

  withStore("a window lists its newest `keep` until the pruner deletes the oldest, in batches", async (s) => {
    const { emitterId, event, seqs } = fixtures();
    for (let n = 0; n < 105; n++) await s.insertEvent(event(n));
    await s.insertEvent(event(1000, "other"));
    const window = { keep: 100 };
    const page = await s.listEvents(emitterId, { channel: "", limit: 1, window });
    assert.equal(page.totalCount, 100);
    assert.deepEqual(page.items[0]?.event, { n: 104 });
    assert.deepEqual(await seqs(s, window), range(5, 104));
    // Toward newer events from an old cursor, the page starts at the window's oldest.
    const newer = await s.listEvents(emitterId, { channel: "", limit: 3, before: { ms: 7, seq: 0 }, window });
    assert.deepEqual(
      newer.items.map((e) => e.idSeq),
      [7, 6, 5],
    );
    assert.equal(await s.countEvents(emitterId, ""), 105);
    assert.equal((await s.listEvents(emitterId, { channel: "", limit: 1 })).totalCount, 105);

    const first = await s.pruneEvents(emitterId, "", 3);
    assert.deepEqual(first, { deleted: 3, last: { ms: 7, seq: 2 } });
    // The next batch starts after the last one's newest.
    assert.deepEqual(await s.pruneEvents(emitterId, "", 2, { after: first.last }), {
      deleted: 2,
      last: { ms: 7, seq: 4 },
    });
    assert.deepEqual(await s.pruneEvents(emitterId, "", 2, { after: { ms: 7, seq: 1000 } }), { deleted: 0 });
    assert.equal(await s.countEvents(emitterId, ""), 100);
    assert.deepEqual(await seqs(s), range(5, 104));
    assert.deepEqual(await seqs(s, undefined, "other"), [1000]);
    // A smaller window shows fewer at once.
    assert.deepEqual(await seqs(s, { keep: 3 }), [102, 103, 104]);
    // Counts follow range deletes.
    assert.equal(await s.deleteEvents(emitterId, { ms: 7, seq: 50 }, { ms: 7, seq: 59 }), 10);
    assert.equal(await s.countEvents(emitterId, ""), 90);
    await s.insertEvent(event(105));
    assert.equal(await s.countEvents(emitterId, ""), 91);
    assert.deepEqual(await s.listChannels(emitterId), ["", "other"]);
  });

  withStore(
    "a range is pruned between its bounds only, `after` exclusive and `upTo` inclusive",
    async (s) => {
      const { emitterId, event, seqs } = fixtures();
      for (let n = 0; n < 10; n++) await s.insertEvent(event(n));
      const bounds = { after: { ms: 7, seq: 1 }, upTo: { ms: 7, seq: 6 } };
      const first = await s.pruneEvents(emitterId, "", 3, bounds);
      assert.deepEqual(first, { deleted: 3, last: { ms: 7, seq: 4 } });
      assert.deepEqual(await s.pruneEvents(emitterId, "", 3, { ...bounds, after: first.last }), {
        deleted: 2,
        last: { ms: 7, seq: 6 },
      });
      assert.deepEqual(await s.pruneEvents(emitterId, "", 3, { ...bounds, after: { ms: 7, seq: 6 } }), {
        deleted: 0,
      });
      assert.deepEqual(await seqs(s), [0, 1, 7, 8, 9]);
      assert.equal(await s.countEvents(emitterId, ""), 5);
    },
  );

  withStore(
    "an event stored with its window's size keeps the window exact, whether a driver reuses a row or appends",
    async (s) => {
      const { emitterId, event, seqs } = fixtures();
      for (let n = 0; n < 103; n++) await s.insertEvent(event(n), 100);
      await s.insertEvent(event(1000, "other"), 100);
      assert.deepEqual(await seqs(s, { keep: 100 }), range(3, 102));
      const stored = await s.countEvents(emitterId, "");
      assert.ok(stored === 100 || stored === 103, `${stored} stored`);
      // The pruner brings an appending driver's window down to the same rows.
      await s.pruneEvents(emitterId, "", stored - 100);
      assert.deepEqual(await seqs(s), range(3, 102));
      assert.deepEqual(await seqs(s, undefined, "other"), [1000]);
    },
  );

  withStore("a window of 1,000 pages through every event it keeps, 100 at a time", async (s) => {
    const { emitterId, event, seqs } = fixtures();
    await s.transaction(async (tx) => {
      for (let n = 0; n < 1200; n++) await tx.insertEvent(event(n));
    });
    const window = { keep: 1000 };
    assert.equal((await s.listEvents(emitterId, { channel: "", limit: 100, window })).totalCount, 1000);
    assert.deepEqual(await seqs(s, window), range(200, 1199));
  });

  withStore(
    "age pruning deletes exactly the events older than the limit, and the window hides them",
    async (s) => {
      const { emitterId, event, seqs } = fixtures();
      for (let n = 0; n < 10; n++) await s.insertEvent(event(n, "", 1000 + n));
      const window = { keep: 100, sinceMs: 1005 };
      assert.deepEqual(await seqs(s, window), range(5, 9));
      assert.equal((await s.listEvents(emitterId, { channel: "", limit: 1, window })).totalCount, 5);
      // Both limits: the newest `keep` of those within the age.
      assert.deepEqual(await seqs(s, { keep: 2, sinceMs: 1005 }), [8, 9]);
      assert.deepEqual(await seqs(s, { keep: 4, sinceMs: 1005 }), [6, 7, 8, 9]);
      assert.equal((await s.pruneEvents(emitterId, "", 3, { olderThanMs: 1005 })).deleted, 3);
      // Partly pruned: still the five within the age, whichever way a driver counts them.
      assert.equal((await s.listEvents(emitterId, { channel: "", limit: 1, window })).totalCount, 5);
      await s.insertEvent(event(10, "", 1010));
      assert.equal((await s.listEvents(emitterId, { channel: "", limit: 1, window })).totalCount, 6);
      assert.equal((await s.pruneEvents(emitterId, "", 3, { olderThanMs: 1005 })).deleted, 2);
      assert.equal((await s.pruneEvents(emitterId, "", 3, { olderThanMs: 1005 })).deleted, 0);
      assert.deepEqual(await seqs(s), range(5, 10));
      assert.equal(await s.countEvents(emitterId, ""), 6);
    },
  );

  withStore("the pruner's sweep walks every channel of every emitter once, in order", async (s) => {
    const a = fixtures();
    const b = fixtures();
    for (const f of [a, b]) {
      await s.insertEvent(f.event(0, "x"));
      await s.insertEvent(f.event(1, ""));
      await s.insertEvent(f.event(2, "x"));
    }
    const seen: string[] = [];
    let key = await s.nextEventWindow();
    while (key) {
      seen.push(`${key.emitterId}/${key.channel}`);
      key = await s.nextEventWindow(key);
    }
    const mine = seen.filter((k) => k.startsWith(a.emitterId) || k.startsWith(b.emitterId));
    assert.deepEqual(
      new Set(mine),
      new Set([`${a.emitterId}/`, `${a.emitterId}/x`, `${b.emitterId}/`, `${b.emitterId}/x`]),
    );
    assert.equal(mine.length, 4);
  });

  withStore("a rolled-back transaction's events are neither listed nor counted", async (s) => {
    const { emitterId, event } = fixtures();
    await s.insertEvent(event(0));
    assert.equal(await s.countEvents(emitterId, ""), 1);
    await assert.rejects(
      s.transaction(async (tx) => {
        await tx.insertEvent(event(1));
        assert.equal(await tx.countEvents(emitterId, ""), 2);
        throw new Error("abort");
      }),
      /abort/,
    );
    assert.equal(await s.countEvents(emitterId, ""), 1);
    assert.equal(
      (await s.listEvents(emitterId, { channel: "", limit: 10, window: { keep: 100 } })).totalCount,
      1,
    );
  });

  withStore(
    "a page with maxBytes ends before the event that would take it past them, and holds one at least",
    async (s) => {
      const { emitterId } = fixtures();
      // Events of about 100, 300, 100, 500 and 100 bytes of JSON.
      const sizes = [100, 300, 100, 500, 100];
      for (const [n, size] of sizes.entries())
        await s.insertEvent({
          emitterId,
          channel: "",
          id: `7-${n}`,
          idMs: 7,
          idSeq: n,
          indexedAtMs: 7,
          event: { pad: "x".repeat(size - 10) },
          meta: { emit_id: `e${n}`, name: "", emitter_id: emitterId },
        });
      const page = async (maxBytes: number, before = { ms: 0, seq: 0 }) =>
        (await s.listEvents(emitterId, { channel: "", limit: 10, before, maxBytes })).items
          .map((e) => e.idSeq)
          .reverse();
      assert.deepEqual(await page(450), [0, 1]);
      assert.deepEqual(await page(520), [0, 1, 2]);
      assert.deepEqual(await page(50), [0], "one event at least");
      assert.deepEqual(await page(10_000), [0, 1, 2, 3, 4]);
      assert.deepEqual(await page(450, { ms: 7, seq: 2 }), [3]);
      const found = await s.searchEvents(
        { emitterId, channel: "" },
        { limit: 10, before: { ms: 0, seq: 0, emitterId: "" }, maxBytes: 520 },
      );
      assert.deepEqual(
        found.items.map((e) => e.idSeq),
        [2, 1, 0],
      );
    },
  );
}
