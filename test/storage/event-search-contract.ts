/**
 * The event search on both drivers (storage/event-search.ts): the text index and JSON paths stay exact
 * whatever writes the events table (a window's slot overwritten in place, a window made smaller, a
 * range deleted), and a search pages newest first.
 */
import assert from "node:assert/strict";
import type { EventRecord } from "../../src/domain/types.ts";
import type { Storage } from "../../src/storage/port.ts";

type WithStore = (title: string, fn: (s: Storage) => Promise<void>) => void;

export function eventSearchContract(withStore: WithStore): void {
  const emitterId = "dc_search";
  const event = (n: number, body: unknown, channel = ""): EventRecord => ({
    emitterId,
    channel,
    id: `9-${n}`,
    idMs: 9,
    idSeq: n,
    indexedAtMs: 9,
    event: body,
    meta: { emit_id: `e${n}`, name: channel, emitter_id: emitterId },
  });
  const found = async (
    s: Storage,
    search: { text?: string[]; where?: Array<{ path: string[]; value: string }> },
  ) =>
    (await s.searchEvents({ emitterId, channel: "", ...search }, { limit: 100, count: true })).items.map(
      (e) => e.idSeq,
    );

  withStore(
    "a search finds exactly the kept events, after overwrites, a smaller window and deletes",
    async (s) => {
      for (let n = 0; n < 5; n++)
        await s.insertEvent(event(n, { word: `Alpha${n}`, id: n, common: "shared" }), 3);
      await s.insertEvent(event(50, { word: "alpha-other" }, "other"), 3);
      // The window of 3 kept 2, 3, 4: the overwritten rows left the index with their text.
      assert.deepEqual(await found(s, { text: ["alpha"] }), [4, 3, 2]);
      assert.deepEqual(await found(s, { text: ["alpha0"] }), []);
      assert.deepEqual(await found(s, { text: ["ALPHA3"] }), [3]);
      assert.deepEqual(await found(s, { text: ["shared", "alpha4"] }), [4]);
      assert.deepEqual(await found(s, { where: [{ path: ["id"], value: "3" }] }), [3]);
      assert.deepEqual(await found(s, { where: [{ path: ["id"], value: "0" }] }), []);
      // A smaller window and a deleted range.
      await s.insertEvent(event(5, { word: "Alpha5" }), 2);
      assert.deepEqual(await found(s, { text: ["alpha"] }), [5, 4]);
      assert.equal(await s.deleteEvents(emitterId, { ms: 9, seq: 5 }, { ms: 9, seq: 5 }), 1);
      assert.deepEqual(await found(s, { text: ["alpha"] }), [4]);
      const page = await s.searchEvents(
        { emitterId, channel: "other", text: ["alpha"] },
        { limit: 10, count: true },
      );
      assert.deepEqual([page.items.map((e) => e.idSeq), page.totalCount], [[50], 1]);
      await s.deleteEvents(emitterId, undefined, undefined);
      assert.deepEqual(await found(s, { text: ["alpha"] }), []);
    },
  );

  withStore("a search pages newest first with cursors, within a time range", async (s) => {
    for (let n = 0; n < 5; n++)
      await s.insertEvent({ ...event(n, { text: "page me" }), idMs: 100 + n, id: `${100 + n}-${n}` }, 100);
    const search = { emitterId, channel: "", text: ["page"], sinceMs: 101, untilMs: 104 };
    const first = await s.searchEvents(search, { limit: 2, count: true });
    assert.deepEqual([first.items.map((e) => e.idMs), first.totalCount], [[103, 102], 3]);
    const last = first.items.at(-1)!;
    const next = await s.searchEvents(search, {
      limit: 2,
      after: { ms: last.idMs, seq: last.idSeq, emitterId },
    });
    assert.deepEqual([next.items.map((e) => e.idMs), next.totalCount], [[101], -1]);
    const counted = await s.searchEvents(search, {
      limit: 2,
      after: { ms: 102, seq: 2, emitterId },
      count: true,
    });
    assert.equal(counted.totalCount, 3, "every match counts, on any page");
    const back = await s.searchEvents(search, { limit: 1, before: { ms: 101, seq: 1, emitterId } });
    assert.deepEqual(
      back.items.map((e) => e.idMs),
      [102],
    );
  });
}
