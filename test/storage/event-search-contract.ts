/**
 * The event search on both drivers (storage/event-search.ts): the text index and JSON paths stay exact
 * whatever writes the events table (a window's slot overwritten in place, a window made smaller, a
 * range deleted), and a search pages newest first.
 */
import assert from "node:assert/strict";
import type { EventRecord } from "../../src/domain/types.ts";
import { indexedChars } from "../../src/storage/event-search.ts";
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
      // What the pruner does in the background (domain/events/pruner.ts), where a driver appended.
      const pruneTo = async (keep: number) => {
        const excess = (await s.countEvents(emitterId, "")) - keep;
        if (excess > 0) await s.pruneEvents(emitterId, "", excess);
      };
      await pruneTo(3);
      // The window of 3 kept 2, 3, 4: the overwritten or pruned rows left the index with their text.
      assert.deepEqual(await found(s, { text: ["alpha"] }), [4, 3, 2]);
      assert.deepEqual(await found(s, { text: ["alpha0"] }), []);
      assert.deepEqual(await found(s, { text: ["ALPHA3"] }), [3]);
      assert.deepEqual(await found(s, { text: ["shared", "alpha4"] }), [4]);
      // A word shorter than a trigram is checked on the rows the longer words found.
      assert.deepEqual(await found(s, { text: ["alpha", "A3"] }), [3]);
      assert.deepEqual(await found(s, { text: ["a4", "shared"] }), [4]);
      assert.deepEqual(await found(s, { text: ["alpha", "4", "shared"] }), [4]);
      assert.deepEqual(await found(s, { text: ["alpha", "zq"] }), []);
      assert.deepEqual(await found(s, { where: [{ path: ["id"], value: "3" }] }), [3]);
      assert.deepEqual(await found(s, { where: [{ path: ["id"], value: "0" }] }), []);
      // A smaller window and a deleted range.
      await s.insertEvent(event(5, { word: "Alpha5" }), 2);
      await pruneTo(2);
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

  withStore(
    `a search finds an event by the words of its first ${indexedChars} characters, not by those past them`,
    async (s) => {
      const filler = "x".repeat(indexedChars);
      // A large window's rows and a small one's (PostgreSQL indexes the latter later: migration 016).
      for (const [n, window] of [
        [1, 1000],
        [2, 2],
      ] as const)
        await s.insertEvent(event(n, { head: `head${n}word`, filler, tail: `tail${n}word`, id: n }), window);
      assert.deepEqual(await found(s, { text: ["head1word"] }), [1]);
      assert.deepEqual(await found(s, { text: ["head2word"] }), [2]);
      // Past the characters indexed, a word is found by neither store, nor a value by `where`.
      assert.deepEqual(await found(s, { text: ["tail1word"] }), []);
      assert.deepEqual(await found(s, { text: ["tail2word"] }), []);
      assert.deepEqual(await found(s, { where: [{ path: ["tail"], value: "tail1word" }] }), []);
    },
  );

  withStore(
    "a search finds the same events before and after the store puts them in its indexes later",
    async (s) => {
      // A small window's commit stores rows the search's indexes get later on PostgreSQL (migration 016).
      for (let n = 0; n < 5; n++) await s.insertEvent(event(n, { word: `Later${n}`, id: n }), 3);
      const searches = async () => [
        await found(s, { text: ["later"] }),
        await found(s, { text: ["LATER4"] }),
        await found(s, { where: [{ path: ["id"], value: "3" }] }),
      ];
      const before = await searches();
      assert.deepEqual(before[0]!.slice(0, 3), [4, 3, 2]);
      assert.deepEqual(before.slice(1), [[4], [3]]);
      // Only what was stored before the given time, none of it twice (SQLite's commits leave nothing out).
      const index = s.indexEventsForSearch?.bind(s);
      if (index) {
        assert.equal(await index(8, 100), 0);
        assert.equal((await index(10, 2)) + (await index(10, 100)), before[0]!.length);
        assert.equal(await index(10, 100), 0);
      }
      assert.deepEqual(await searches(), before);
      // Rows in the indexes and rows not yet in them, in one search and one page order.
      await s.insertEvent(event(5, { word: "Later5", id: 5 }), 3);
      assert.deepEqual((await found(s, { text: ["later"] })).slice(0, 3), [5, 4, 3]);
      const page = await s.searchEvents(
        { emitterId, channel: "", text: ["later"] },
        { limit: 2, count: true },
      );
      assert.deepEqual(
        page.items.map((e) => e.idSeq),
        [5, 4],
      );
      await s.deleteEvents(emitterId, undefined, undefined);
      assert.deepEqual(await searches(), [[], [], []]);
    },
  );

  withStore(
    "the indexing left for later takes large events a few at a time, and all of them in the end",
    async (s) => {
      const index = s.indexEventsForSearch?.bind(s);
      if (!index) return;
      // Random text past the characters indexed: each counts as `indexedChars` of a batch's 1 MiB.
      const words = (n: number) =>
        Array.from({ length: 20_000 }, (_, k) => ((n * 7919 + k * 104729) % 999_983).toString(36)).join(" ");
      for (let n = 0; n < 20; n++) await s.insertEvent(event(n, { big: `${words(n)} big${n}end` }), 20);
      const first = await index(10, 200);
      assert.ok(first >= 1 && first < 20, `a statement indexed ${first} of 20 large events`);
      let all = first;
      for (let k = 0; k < 20 && all < 20; k++) all += await index(10, 200);
      assert.equal(all, 20);
      assert.deepEqual(await found(s, { text: ["big7end"] }), []);
      assert.equal((await found(s, { text: ["big"] })).length, 20);
    },
  );

  withStore(
    "an event holding U+0000 or an unpaired surrogate is stored, and found by its text",
    async (s) => {
      await s.insertEvent(event(1, { text: "odd one", nul: "a\u0000b", lone: "\ud800", id: 5 }), 100);
      await s.insertEvent(event(2, { text: "escaped \\u0000 only", id: 6 }), 100);
      assert.deepEqual(await found(s, { text: ["odd one"] }), [1]);
      // The text "\u0000" (an escaped backslash) is plain JSON on both stores.
      assert.deepEqual(await found(s, { where: [{ path: ["id"], value: "6" }] }), [2]);
    },
  );

  withStore(
    "a word is found only where it occurs whole, case-insensitively in any script, wildcards and quotes as written",
    async (s) => {
      const bodies = [
        "abcd bcde", // every trigram of "abcde", but not the word
        "xabcdex",
        "ÉCOLE Ünïcode",
        "école",
        "ecole",
        '100%_off "quoted"',
        "100xoff",
      ];
      for (const [n, text] of bodies.entries()) await s.insertEvent(event(n, { text }), 100);
      const text = (...words: string[]) => found(s, { text: words });
      assert.deepEqual(await text("abcde"), [1]);
      assert.deepEqual(await text("ABCDE"), [1]);
      assert.deepEqual(await text("bcd"), [1, 0]);
      assert.deepEqual(await text("École"), [3, 2]);
      assert.deepEqual(await text("ünïcode"), [2]);
      assert.deepEqual(await text("cole"), [4, 3, 2]);
      assert.deepEqual(await text("0%_o"), [5]);
      assert.deepEqual(await text("0%xo"), []);
      // The stored JSON text escapes the quotes: \"quoted\".
      assert.deepEqual(await text('quoted\\"'), [5]);
      assert.deepEqual(await text("abcd", "bcde"), [1, 0]);
    },
  );

  withStore("where matches a value as a string or as the number, boolean or null it spells", async (s) => {
    const bodies = [
      { v: 1000, tag: "Case" },
      { v: "1000", tag: 'say "hi"' },
      { v: 42.5, tag: true },
      { v: "true", tag: null },
      { v: { nested: 1000 }, tag: "case" },
      // Text JSON writes escaped, or as it is though not ASCII, and a short value down a path.
      { "a\\b": "c\\d", city: "Zürich", deep: { id: 7 } },
    ];
    for (const [n, b] of bodies.entries()) await s.insertEvent(event(n, b), 100);
    const where = (path: string, value: string) => found(s, { where: [{ path: [path], value }] });
    assert.deepEqual(await where("v", "1000"), [1, 0]);
    assert.deepEqual(await where("v", "1e3"), [0], "the number 1e3 spells, not the string");
    assert.deepEqual(await where("v", "1000.0"), [0]);
    assert.deepEqual(await where("v", "42.50"), [2]);
    assert.deepEqual(await where("v", "true"), [3]);
    assert.deepEqual(await where("tag", "true"), [2]);
    assert.deepEqual(await where("tag", "null"), [3]);
    assert.deepEqual(await where("tag", "Case"), [0], "exact, case included");
    assert.deepEqual(await where("tag", 'say "hi"'), [1]);
    assert.deepEqual(await where("v", "nested"), []);
    assert.deepEqual(await where("a\\b", "c\\d"), [5]);
    assert.deepEqual(await where("city", "zürich"), [], "exact, case included");
    assert.deepEqual(await where("city", "Zürich"), [5]);
    assert.deepEqual(await found(s, { where: [{ path: ["deep", "id"], value: "7" }] }), [5]);
    assert.deepEqual(await found(s, { where: [{ path: ["id"], value: "7" }] }), [], "at the path only");
  });

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
