/**
 * The SQLite event search with large events (a review: one tenant's 2,000 events of 1 MiB made a search
 * hold the store's lock for over a minute while it indexed them, and every other tenant's emits waited).
 * The index takes the first `indexedChars` of each event, in batches bounded by characters as well as
 * rows, and a search indexes what it must find without holding the lock.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { DatabaseSync } from "node:sqlite";
import { test } from "node:test";
import type { EventRecord } from "../../src/domain/types.ts";
import { indexedChars } from "../../src/storage/event-search.ts";
import { openSqliteStorage } from "../../src/storage/sqlite/driver.ts";
import { TextGenerations } from "../../src/storage/sqlite/search-generations.ts";

const event = (emitterId: string, n: number, body: unknown): EventRecord => ({
  emitterId,
  channel: "",
  id: `9-${n}`,
  idMs: 9,
  idSeq: n,
  indexedAtMs: 9,
  event: body,
  meta: { emit_id: `e${n}`, name: "", emitter_id: emitterId },
});

/** Text of random lowercase words, `chars` long or a word more: as costly to index as text gets. */
function randomWords(chars: number, seed: number): string {
  let state = seed;
  const next = () => {
    state = (state * 1103515245 + 12345) & 0x7fffffff;
    return state;
  };
  const words: string[] = [];
  for (let length = 0; length < chars; ) {
    let word = "";
    for (let i = 3 + (next() % 8); i > 0; i--) word += String.fromCharCode(97 + (next() % 26));
    words.push(word);
    length += word.length + 1;
  }
  return words.join(" ");
}

/** A store in a fresh data dir whose index catches up before a search only, closed and removed after `fn`. */
async function withStore(fn: (store: ReturnType<typeof openSqliteStorage>) => Promise<void>): Promise<void> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  const store = openSqliteStorage({ dataDir, searchIndexDelayMs: 3_600_000 });
  try {
    await fn(store);
  } finally {
    await store.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

const findIds = async (store: ReturnType<typeof openSqliteStorage>, emitterId: string, word: string) =>
  (await store.searchEvents({ emitterId, channel: "", text: [word] }, { limit: 100, count: true })).items.map(
    (e) => e.id,
  );

test("sqlite: a search after a tenant's large events indexes them without holding the store's lock: other writes go on meanwhile", () =>
  withStore(async (store) => {
    // 120 events of 256 KiB of random words: indexed whole under the lock, about 2.5 s in which no
    // other write was made.
    for (let batch = 0; batch < 12; batch++) {
      await store.transaction(async (tx) => {
        for (let n = batch * 10; n < batch * 10 + 10; n++)
          await tx.insertEvent(event("dc_big", n, { n, text: randomWords(256 * 1024, n + 1) }), 1000);
      });
    }
    await store.insertEvent(event("dc_big", 120, { text: "needleword" }), 1000);
    let answered = false;
    const started = performance.now();
    const searching = findIds(store, "dc_big", "needleword").finally(() => {
      answered = true;
    });
    // Another tenant's small writes, each on a turn of its own, as a server's come in: the longest any
    // waited, against the search's whole time (both stretch alike on a loaded machine).
    let longestWait = 0;
    let stored = 0;
    while (!answered) {
      await new Promise((resolve) => setImmediate(resolve));
      const at = performance.now();
      await store.insertEvent(event("dc_small", stored++, { text: "smallword" }), 100);
      longestWait = Math.max(longestWait, performance.now() - at);
    }
    const searchMs = performance.now() - started;
    assert.deepEqual(await searching, ["9-120"]);
    assert.ok(
      longestWait < searchMs / 2,
      `the longest write waited ${longestWait.toFixed(0)} ms of the search's ${searchMs.toFixed(0)} ms`,
    );
    // What was stored while it indexed is found by the next search.
    assert.equal((await findIds(store, "dc_small", "smallword")).length, Math.min(stored, 100));
  }));

test("sqlite: a search finds an event by the words of its first 64 Ki characters, not by those past them", () =>
  withStore(async (store) => {
    const filler = "x".repeat(indexedChars);
    await store.insertEvent(event("dc_big", 1, { head: "headword", filler, tail: "tailword" }), 1000);
    await store.insertEvent(event("dc_big", 2, { head: "tailword" }), 1000);
    assert.deepEqual(await findIds(store, "dc_big", "headword"), ["9-1"]);
    // Past the characters indexed: the event is not a candidate, though its text holds the word.
    assert.deepEqual(await findIds(store, "dc_big", "tailword"), ["9-2"]);
  }));

test("sqlite: large events rewritten in a window's slots are found by their newest text only", () =>
  withStore(async (store) => {
    // A window of 3: each event past the third overwrites the oldest one's row (queued for the index).
    const text = (n: number) => `word${n}x ${randomWords(100 * 1024, n + 1)}`;
    for (let n = 0; n < 3; n++) await store.insertEvent(event("dc_big", n, { text: text(n) }), 3);
    assert.deepEqual(await findIds(store, "dc_big", "word0x"), ["9-0"]);
    for (let n = 3; n < 12; n++) await store.insertEvent(event("dc_big", n, { text: text(n) }), 3);
    for (let n = 0; n < 12; n++)
      assert.deepEqual(await findIds(store, "dc_big", `word${n}x`), n >= 9 ? [`9-${n}`] : [], `word${n}x`);
  }));

test("sqlite: an indexing batch ends at the row that spends its characters, and the next goes on from there", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  const store = openSqliteStorage({ dataDir, searchIndexDelayMs: 3_600_000 });
  try {
    for (let n = 1; n <= 5; n++)
      await store.insertEvent(event("dc_big", n, { text: "y".repeat(40_000) }), 10);
  } finally {
    await store.close();
  }
  // The worker's batches, played on connections of the test's own.
  const db = new DatabaseSync(path.join(dataDir, "fount.db"));
  const index = new DatabaseSync(path.join(dataDir, "fount-search.db"));
  try {
    db.exec("UPDATE events_text_mark SET read_to = (SELECT max(rowid) FROM events)");
    const { lo } = db.prepare("SELECT indexed_to AS lo FROM events_text_mark").get() as { lo: number };
    const generations = new TextGenerations(index, db, 65_536);
    // Two rows of 40,000 characters pass 50,000: the batch takes them, and no more.
    const first = generations.indexBatch(1000, { chars: 50_000 });
    assert.deepEqual([first.full, first.indexedTo], [true, lo + 2]);
    db.prepare("UPDATE events_text_mark SET indexed_to = ?").run(first.indexedTo);
    const rest = generations.indexBatch(1000, { chars: 500_000 });
    assert.deepEqual([rest.full, rest.indexedTo], [false, lo + 5]);
  } finally {
    index.close();
    db.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
