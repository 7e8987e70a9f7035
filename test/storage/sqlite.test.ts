import assert from "node:assert/strict";
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { createRequire, syncBuiltinESMExports } from "node:module";
import os from "node:os";
import path from "node:path";
import { DatabaseSync } from "node:sqlite";
import { test } from "node:test";
import { Worker } from "node:worker_threads";
import type { EventRecord } from "../../src/domain/types.ts";
import { openSqliteStorage } from "../../src/storage/sqlite/driver.ts";
import { ftsQuery } from "../../src/storage/sqlite/event-search.ts";
import { TextGenerations } from "../../src/storage/sqlite/search-generations.ts";
import { indexFileOf, removeIndexFile } from "../../src/storage/sqlite/search-indexer.ts";
import { SearchThreads } from "../../src/storage/sqlite/search-threads.ts";
import { storageContract } from "./contract.ts";

storageContract("sqlite", async () =>
  openSqliteStorage({ dataDir: mkdtempSync(path.join(os.tmpdir(), "fount-store-")) }),
);

const migrationsDir = path.join(import.meta.dirname, "../../src/storage/sqlite/migrations");

const event = (n: number): EventRecord => ({
  emitterId: "dc_kept",
  channel: "",
  id: `9-${n}`,
  idMs: 9,
  idSeq: n,
  indexedAtMs: 9,
  event: { n },
  meta: { emit_id: `e${n}`, name: "", emitter_id: "dc_kept" },
});

const seqs = async (store: ReturnType<typeof openSqliteStorage>) =>
  (await store.listEvents("dc_kept", { channel: "", limit: 100, window: { keep: 100 } })).items
    .map((e) => e.idSeq)
    .reverse();

test("sqlite: a reopened store counts its windows again, and lists each within its window", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  const first = openSqliteStorage({ dataDir });
  for (let n = 0; n < 102; n++) await first.insertEvent(event(n));
  await first.close();
  const second = openSqliteStorage({ dataDir });
  try {
    await second.insertEvent(event(102));
    assert.equal(await second.countEvents("dc_kept", ""), 103);
    assert.deepEqual(
      await seqs(second),
      Array.from({ length: 100 }, (_, i) => i + 3),
    );
  } finally {
    await second.close();
  }
});

test("sqlite: migration 004 keeps the events of a store made before event windows, in order", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  const db = new DatabaseSync(path.join(dataDir, "fount.db"));
  db.exec(
    "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)",
  );
  for (const file of readdirSync(migrationsDir).sort()) {
    const version = Number.parseInt(file, 10);
    if (version >= 4) continue;
    db.exec(readFileSync(path.join(migrationsDir, file), "utf8"));
    db.prepare("INSERT INTO schema_migrations VALUES (?, ?, 0)").run(version, file);
  }
  // Rows of the old table, inserted out of ID order, and a second channel.
  const insert = db.prepare(
    "INSERT INTO events (emitter_id, channel, id, id_ms, id_seq, indexed_at_ms, event_json, meta_json) VALUES (?, ?, ?, 9, ?, 9, ?, ?)",
  );
  for (const n of [2, 0, 1, 4, 3]) {
    const e = event(n);
    insert.run(e.emitterId, "", e.id, n, JSON.stringify(e.event), JSON.stringify(e.meta));
  }
  insert.run("dc_kept", "other", "9-100", 100, "{}", "{}");
  db.close();

  const store = openSqliteStorage({ dataDir });
  try {
    assert.deepEqual(await seqs(store), [0, 1, 2, 3, 4]);
    assert.deepEqual((await store.listEvents("dc_kept", { channel: "", limit: 1 })).items[0]?.event, {
      n: 4,
    });
    // Pruning takes the oldest, whatever order the rows came in.
    await store.insertEvent(event(5));
    assert.equal((await store.pruneEvents("dc_kept", "", 2)).deleted, 2);
    assert.deepEqual(await seqs(store), [2, 3, 4, 5]);
    assert.deepEqual(await store.listChannels("dc_kept"), ["", "other"]);
  } finally {
    await store.close();
  }
});

test("sqlite: a window at its size takes a new event in its oldest row, so the file does not grow", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  const store = openSqliteStorage({ dataDir });
  try {
    for (let n = 0; n < 100; n++) await store.insertEvent(event(n), 100);
    const db = new DatabaseSync(path.join(dataDir, "fount.db"), { readOnly: true });
    const rowids = () =>
      (db.prepare("SELECT rowid AS r FROM events ORDER BY rowid").all() as Array<{ r: number }>).map(
        (r) => r.r,
      );
    const before = rowids();
    for (let n = 100; n < 250; n++) await store.insertEvent(event(n), 100);
    assert.deepEqual(rowids(), before, "the same 100 rows, rewritten");
    db.close();
    assert.equal(await store.countEvents("dc_kept", ""), 100);
    assert.deepEqual(
      await seqs(store),
      Array.from({ length: 100 }, (_, i) => i + 150),
    );
  } finally {
    await store.close();
  }
});

test("sqlite: an event whose statement fails leaves its window and its count as they were", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  const store = openSqliteStorage({ dataDir });
  try {
    for (let n = 0; n < 3; n++) await store.insertEvent(event(n));
    assert.equal(await store.countEvents("dc_kept", ""), 3);
    // Another connection makes the store refuse one event, as a full disk or a constraint would.
    const other = new DatabaseSync(path.join(dataDir, "fount.db"));
    other.exec(`CREATE TRIGGER refuse_insert BEFORE INSERT ON events WHEN NEW.id = '9-3'
                BEGIN SELECT RAISE(ABORT, 'refused'); END`);
    other.close();
    await assert.rejects(store.insertEvent(event(3)), /refused/);
    assert.equal(await store.countEvents("dc_kept", ""), 3);
    await store.insertEvent(event(4));
    assert.equal(await store.countEvents("dc_kept", ""), 4);
    assert.deepEqual(await seqs(store), [0, 1, 2, 4]);
  } finally {
    await store.close();
  }
});

/** The search index's generations, on a connection with the index file attached as `search`. */
function generationsIn(db: DatabaseSync): number[] {
  return (
    db.prepare("SELECT gen FROM search.text_generations ORDER BY gen").all() as Array<{ gen: number }>
  ).map((r) => r.gen);
}

/** The IDs the FTS index (in its own file) finds for `text`, read on a connection of its own (a search would catch up first). */
function indexedIds(dataDir: string, text: string): string[] | undefined {
  const db = new DatabaseSync(path.join(dataDir, "fount.db"), { readOnly: true });
  db.prepare("ATTACH DATABASE ? AS search").run(path.join(dataDir, "fount-search.db"));
  try {
    // Rows queued, or past the mark (migration 022): not indexed yet.
    const waiting = db
      .prepare(
        `SELECT EXISTS (SELECT 1 FROM events_text_queue) OR EXISTS
           (SELECT 1 FROM events WHERE rowid > (SELECT indexed_to FROM events_text_mark)) AS w`,
      )
      .get() as { w: number };
    if (waiting.w) return undefined;
    const gens = generationsIn(db);
    const each = gens.map(
      (g) => `SELECT rowid AS r FROM search.events_text_${g} WHERE events_text_${g} MATCH ?`,
    );
    return (
      db
        .prepare(
          // The index finds the rows holding each trigram of the text; the text itself is checked on the row.
          `SELECT e.id FROM (${each.join(" UNION ALL ")}) t JOIN events e ON e.rowid = t.r
            WHERE instr(lower(e.event_json), lower(?)) > 0 ORDER BY e.id`,
        )
        .all(...gens.map(() => ftsQuery([text])), text) as Array<{ id: string }>
    ).map((r) => r.id);
  } finally {
    db.close();
  }
}

test("sqlite: the search index catches up after commit by itself: new text in, overwritten and deleted text out", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  const store = openSqliteStorage({ dataDir, searchIndexDelayMs: 10 });
  const until = async (text: string, ids: string[]) => {
    for (let tries = 0; ; tries++) {
      const found = indexedIds(dataDir, text);
      if (found !== undefined) return assert.deepEqual(found, ids);
      assert.ok(tries < 600, "the index caught up within a minute");
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  try {
    // A window of 3: the fourth event overwrites the first one's row, the fifth the second's.
    for (let n = 0; n < 5; n++) await store.insertEvent({ ...event(n), event: { text: `word${n}x` } }, 3);
    await until("word", ["9-2", "9-3", "9-4"]);
    await until("word0x", []);
    await store.deleteEvents("dc_kept", undefined, undefined, "");
    await until("word", []);
  } finally {
    await store.close();
  }
});

/** The IDs of `dc_kept`'s events a search of `text` finds, newest first (at most 10). */
function foundIds(store: ReturnType<typeof openSqliteStorage>, text: string): Promise<string[]> {
  return store
    .searchEvents({ emitterId: "dc_kept", channel: "", text: [text] }, { limit: 10 })
    .then((page) => page.items.map((e) => e.id));
}

/** The index file's generations, their entries, the moved rowids, and the entries whose event is gone. */
function indexState(dataDir: string): {
  gens: number[];
  entries: number[];
  moved: number;
  gone: number[];
  optimized: boolean[];
} {
  const db = new DatabaseSync(path.join(dataDir, "fount.db"), { readOnly: true });
  db.prepare("ATTACH DATABASE ? AS search").run(path.join(dataDir, "fount-search.db"));
  try {
    // One snapshot: the worker may drop a generation between the list and its counts.
    db.exec("BEGIN");
    const gens = generationsIn(db);
    const count = (sql: string) => (db.prepare(sql).get() as { n: number }).n;
    return {
      gens,
      entries: gens.map((g) => count(`SELECT count(*) AS n FROM search.events_text_${g}`)),
      moved: count("SELECT count(*) AS n FROM search.text_moved"),
      optimized: (
        db.prepare("SELECT optimized FROM search.text_generations ORDER BY gen").all() as Array<{
          optimized: number;
        }>
      ).map((r) => r.optimized === 1),
      gone: gens.map((g) =>
        count(
          `SELECT count(*) AS n FROM search.events_text_${g} t WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.rowid = t.rowid)`,
        ),
      ),
    };
  } finally {
    db.close();
  }
}

test("sqlite: the search index drops a generation whose events are gone whole, and moves the few still there out of one", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  const store = openSqliteStorage({
    dataDir,
    searchIndexDelayMs: 10,
    searchGenerations: { rowsPerGeneration: 40, maintainMs: 20 },
  });
  const ids = (emitterId: string, text: string) =>
    store
      .searchEvents({ emitterId, channel: "", text: [text] }, { limit: 100, count: true })
      .then((page) => ({ ids: page.items.map((e) => e.id).sort(), total: page.totalCount }));
  const settled = async (done: (s: ReturnType<typeof indexState>) => boolean) => {
    for (let tries = 0; ; tries++) {
      const state = indexState(dataDir);
      if (done(state)) return state;
      assert.ok(tries < 600, `the index settled within a minute: ${JSON.stringify(state)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  const pinned = (n: number): EventRecord => ({
    ...event(n),
    emitterId: "dc_pinned",
    event: { text: `pinword${n}` },
    meta: { emit_id: `p${n}`, name: "", emitter_id: "dc_pinned" },
  });
  try {
    // A window of 3 first, so its rows (overwritten in place, their rowids kept) are in the first
    // generation; then 150 events of a large window, over several generations.
    for (let n = 0; n < 3; n++) await store.insertEvent(pinned(n), 3);
    for (let n = 0; n < 150; n++)
      await store.insertEvent({ ...event(n), event: { text: `bulkword${n}` } }, 1_000_000);
    assert.equal((await ids("dc_kept", "bulkword")).total, 150);
    const full = await settled((s) => s.gens.length >= 3 && s.entries.reduce((a, b) => a + b) === 153);
    // Every generation but the newest, steady, has its segments merged into one.
    await settled((s) => s.optimized.slice(0, -1).every(Boolean));
    assert.equal((await ids("dc_kept", "bulkword1")).total, 61, "bulkword1, bulkword10 to 19 and 100 to 149");
    // The large window emptied: its entries stay until their generations go.
    await store.deleteEvents("dc_kept", undefined, undefined, "");
    assert.deepEqual(await ids("dc_kept", "bulkword"), { ids: [], total: 0 });
    const after = await settled((s) => s.gens.length === 1);
    assert.ok(after.gens[0]! > full.gens[0]!, "the first generation went once its three live rows moved out");
    assert.equal(after.moved, 3, "the window of 3's rows were moved into the newest generation");
    assert.deepEqual(await ids("dc_pinned", "pinword"), { ids: ["9-0", "9-1", "9-2"], total: 3 });
    // A moved row overwritten in place is indexed where it was moved to: old text out, new text in.
    await store.insertEvent({ ...pinned(3), event: { text: "freshword" } }, 3);
    assert.deepEqual(await ids("dc_pinned", "freshword"), { ids: ["9-3"], total: 1 });
    assert.deepEqual(await ids("dc_pinned", "pinword"), { ids: ["9-1", "9-2"], total: 2 });
    const last = indexState(dataDir);
    assert.equal(last.entries.length, 1);
    assert.ok(last.entries[0]! - last.gone[0]! === 3, `three live entries: ${JSON.stringify(last)}`);
  } finally {
    await store.close();
  }
});

test("sqlite: a new event given a deleted event's rowid replaces its entry in the search index", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  const store = openSqliteStorage({ dataDir, searchIndexDelayMs: 10 });
  const ids = (text: string) => foundIds(store, text);
  try {
    for (let n = 0; n < 3; n++) await store.insertEvent({ ...event(n), event: { text: `oldword${n}` } }, 10);
    assert.deepEqual(await ids("oldword"), ["9-2", "9-1", "9-0"]);
    // Every row gone: SQLite gives the next rows the same rowids, while the index still has their entries.
    await store.deleteEvents("dc_kept", undefined, undefined, "");
    for (let n = 3; n < 5; n++) await store.insertEvent({ ...event(n), event: { text: `newword${n}` } }, 10);
    assert.deepEqual(await ids("oldword"), []);
    assert.deepEqual(await ids("newword"), ["9-4", "9-3"]);
    const state = indexState(dataDir);
    assert.deepEqual(
      state.entries.map((n, i) => n - state.gone[i]!),
      [2],
    );
  } finally {
    await store.close();
  }
});

test("sqlite: a generation begun while a reused rowid's old entry lies past the row that filled it still replaces that entry", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  // No indexing but before a search, so that each step below is indexed when the test says.
  const store = openSqliteStorage({
    dataDir,
    searchIndexDelayMs: 3_600_000,
    searchGenerations: { rowsPerGeneration: 5, maintainMs: 3_600_000 },
  });
  const ids = (text: string) => foundIds(store, text);
  const put = (n: number, text: string) => store.insertEvent({ ...event(n), event: { text } }, 1_000_000);
  try {
    for (let n = 1; n <= 3; n++) await put(n, `oldword${n}`);
    assert.deepEqual(await ids("oldword"), ["9-3", "9-2", "9-1"]);
    // Rowid 4 is deleted before it is indexed, rowid 5 indexed: the first generation holds 1, 2, 3, 5.
    await put(4, "oldword4");
    await put(5, "oldword5");
    await store.deleteEvents("dc_kept", { ms: 9, seq: 4 }, { ms: 9, seq: 4 }, "");
    assert.deepEqual(await ids("oldword5"), ["9-5"]);
    // Rowids 3 to 5 go, and come back for new events: 4 is the fifth entry, the generation is full.
    await store.deleteEvents("dc_kept", { ms: 9, seq: 3 }, { ms: 9, seq: 5 }, "");
    for (let n = 6; n <= 8; n++) await put(n, `newword${n}`);
    assert.deepEqual(await ids("newword"), ["9-8", "9-7", "9-6"]);
    assert.deepEqual(await ids("oldword5"), [], "rowid 5's old text is gone with its new event");
    assert.deepEqual(await ids("oldword"), ["9-2", "9-1"]);
  } finally {
    await store.close();
  }
});

test("sqlite: a search index file from before its generations is made anew, and searches stay exact", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  const first = openSqliteStorage({ dataDir });
  for (let n = 0; n < 3; n++) await first.insertEvent({ ...event(n), event: { text: `oldword${n}` } }, 10);
  await first.close();
  // The file as migration 020 made it: the same store's token, one FTS5 table, nothing in it.
  const indexFile = path.join(dataDir, "fount-search.db");
  const token = (
    new DatabaseSync(indexFile).prepare("SELECT token FROM search_index_of").get() as { token: string }
  ).token;
  for (const suffix of ["", "-wal", "-shm"]) rmSync(indexFile + suffix, { force: true });
  const old = new DatabaseSync(indexFile);
  old.exec(`CREATE TABLE search_index_of (id INTEGER PRIMARY KEY CHECK (id = 1), token TEXT NOT NULL);
    CREATE VIRTUAL TABLE events_text USING fts5(event_json, tokenize = 'trigram');`);
  old.prepare("INSERT INTO search_index_of (id, token) VALUES (1, ?)").run(token);
  old.close();
  const store = openSqliteStorage({ dataDir, searchIndexDelayMs: 3_600_000 });
  try {
    const page = await store.searchEvents(
      { emitterId: "dc_kept", channel: "", text: ["oldword"] },
      { limit: 10 },
    );
    assert.deepEqual(
      page.items.map((e) => e.id),
      ["9-2", "9-1", "9-0"],
    );
  } finally {
    await store.close();
  }
});

test("sqlite: a search index file whose generations keep trigram positions is made anew without them, and searches stay exact", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  const first = openSqliteStorage({ dataDir });
  for (let n = 0; n < 3; n++) await first.insertEvent({ ...event(n), event: { text: `oldword${n}` } }, 10);
  // Indexed: the store's mark is past every row.
  assert.deepEqual(await foundIds(first, "oldword"), ["9-2", "9-1", "9-0"]);
  await first.close();
  // The file as migrations 021 and 022 left it: the same store's token, a generation with FTS5's default
  // detail (positions), nothing in it while the store's mark says every row was read.
  const indexFile = path.join(dataDir, "fount-search.db");
  const token = (
    new DatabaseSync(indexFile).prepare("SELECT token FROM search_index_of").get() as { token: string }
  ).token;
  removeIndexFile(indexFile);
  const old = new DatabaseSync(indexFile);
  old.exec(`CREATE TABLE search_index_of (id INTEGER PRIMARY KEY CHECK (id = 1), token TEXT NOT NULL);
    CREATE TABLE text_generations (gen INTEGER PRIMARY KEY, lo INTEGER NOT NULL,
      entries INTEGER NOT NULL DEFAULT 0, optimized INTEGER NOT NULL DEFAULT 0);
    CREATE TABLE text_moved (event_rowid INTEGER PRIMARY KEY, gen INTEGER NOT NULL);
    CREATE VIRTUAL TABLE events_text_0 USING fts5(event_json, tokenize = 'trigram');
    INSERT INTO text_generations (gen, lo) VALUES (0, 0);`);
  old.prepare("INSERT INTO search_index_of (id, token) VALUES (1, ?)").run(token);
  old.close();
  const store = openSqliteStorage({ dataDir, searchIndexDelayMs: 3_600_000 });
  try {
    assert.deepEqual(await foundIds(store, "oldword"), ["9-2", "9-1", "9-0"]);
    const file = new DatabaseSync(indexFile, { readOnly: true });
    const tables = file
      .prepare("SELECT sql FROM sqlite_master WHERE name GLOB 'events_text_[0-9]*' AND sql LIKE '%fts5%'")
      .all() as Array<{ sql: string }>;
    file.close();
    assert.ok(tables.length > 0);
    for (const { sql } of tables) assert.match(sql, /detail = none/, sql);
  } finally {
    await store.close();
  }
});

test("sqlite: a search index file of another store is not used: the store makes its own and searches stay exact", async () => {
  const dirs = [0, 1].map(() => mkdtempSync(path.join(os.tmpdir(), "fount-store-")));
  const words = ["alphaword", "betaword"];
  for (const [i, dataDir] of dirs.entries()) {
    const store = openSqliteStorage({ dataDir });
    try {
      // The same rowids in both stores, with other text.
      for (let n = 0; n < 3; n++) await store.insertEvent({ ...event(n), event: { text: words[i] } }, 10);
      assert.deepEqual(await foundIds(store, words[i]!), ["9-2", "9-1", "9-0"]);
    } finally {
      await store.close();
    }
  }
  // The first store's index file, dropped into the second's data dir (a copied or restored data dir).
  for (const suffix of ["", "-wal", "-shm"])
    rmSync(path.join(dirs[1]!, `fount-search.db${suffix}`), { force: true });
  copyFileSync(path.join(dirs[0]!, "fount-search.db"), path.join(dirs[1]!, "fount-search.db"));
  const store = openSqliteStorage({ dataDir: dirs[1]!, searchIndexDelayMs: 3_600_000 });
  try {
    assert.deepEqual(await foundIds(store, "alphaword"), [], "nothing of the other store's index is found");
    assert.deepEqual(await foundIds(store, "betaword"), ["9-2", "9-1", "9-0"]);
  } finally {
    await store.close();
  }
});

/** The rows queued for the search index, and the index's mark (migration 022), read on a connection of their own. */
function indexMark(dataDir: string): { queued: number[]; indexedTo: number; readTo: number } {
  const db = new DatabaseSync(path.join(dataDir, "fount.db"), { readOnly: true });
  try {
    const mark = db.prepare("SELECT indexed_to, read_to FROM events_text_mark").get() as {
      indexed_to: number;
      read_to: number;
    };
    const queued = db.prepare("SELECT event_rowid AS r FROM events_text_queue ORDER BY r").all() as Array<{
      r: number;
    }>;
    return { queued: queued.map((q) => q.r), indexedTo: mark.indexed_to, readTo: mark.read_to };
  } finally {
    db.close();
  }
}

/** A store in a fresh data dir whose search index catches up only before a search. */
function storeIndexingOnSearch(dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"))) {
  return { dataDir, store: openSqliteStorage({ dataDir, searchIndexDelayMs: 3_600_000 }) };
}

/** Stores `dc_kept`'s event `n` with `text`, in a window of `keep`. */
function putText(store: ReturnType<typeof openSqliteStorage>, n: number, text: string, keep = 1_000_000) {
  return store.insertEvent({ ...event(n), event: { text } }, keep);
}

test("sqlite: new events are indexed from the mark, not queued, and found as soon as they are stored", async () => {
  const { dataDir, store } = storeIndexingOnSearch();
  const put = (n: number) => putText(store, n, `markword${n}`);
  try {
    for (let n = 0; n < 30; n++) await put(n);
    assert.deepEqual(indexMark(dataDir), { queued: [], indexedTo: 0, readTo: 0 });
    assert.equal((await foundIds(store, "markword")).length, 10);
    assert.deepEqual(await foundIds(store, "markword29"), ["9-29"]);
    assert.deepEqual(indexMark(dataDir), { queued: [], indexedTo: 30, readTo: 30 });
    // Past the mark again, still not queued; the search reads them too.
    for (let n = 30; n < 40; n++) await put(n);
    assert.deepEqual(indexMark(dataDir).queued, []);
    assert.deepEqual(await foundIds(store, "markword3"), [
      "9-39",
      "9-38",
      "9-37",
      "9-36",
      "9-35",
      "9-34",
      "9-33",
      "9-32",
      "9-31",
      "9-30",
    ]);
    assert.equal(indexMark(dataDir).indexedTo, 40);
  } finally {
    await store.close();
  }
});

test("sqlite: an event rewritten in place is found by its new text only, whether the worker read its row before or not", async () => {
  const { dataDir, store } = storeIndexingOnSearch();
  const put = (n: number, text: string) => putText(store, n, text, 3);
  try {
    // A window of 3: the fourth event overwrites the first one's row before any was read.
    for (let n = 0; n < 4; n++) await put(n, `firstword${n}`);
    assert.deepEqual(indexMark(dataDir).queued, [], "rewritten past the mark: read with its new text");
    assert.deepEqual(await foundIds(store, "firstword"), ["9-3", "9-2", "9-1"]);
    // Read since: the rewrite of the next row is queued, and indexed with its new text.
    await put(4, "secondword4");
    assert.deepEqual(indexMark(dataDir).queued, [2]);
    assert.deepEqual(await foundIds(store, "firstword"), ["9-3", "9-2"]);
    assert.deepEqual(await foundIds(store, "secondword"), ["9-4"]);
    assert.deepEqual(indexMark(dataDir).queued, []);
  } finally {
    await store.close();
  }
});

test("sqlite: a new event given a rowid below the mark is queued and found by its new text only, also when the worker read that rowid's old row first", async () => {
  const { dataDir, store } = storeIndexingOnSearch();
  const put = (n: number, text: string) => putText(store, n, text);
  try {
    for (let n = 1; n <= 5; n++) await put(n, `oldword${n}`);
    assert.equal((await foundIds(store, "oldword")).length, 5);
    // Rows 4 and 5 go; the next events get their rowids again, at or below the mark.
    await store.deleteEvents("dc_kept", { ms: 9, seq: 4 }, { ms: 9, seq: 5 }, "");
    for (let n = 6; n <= 7; n++) await put(n, `newword${n}`);
    assert.deepEqual(indexMark(dataDir), { queued: [4, 5], indexedTo: 5, readTo: 5 });
    assert.deepEqual(await foundIds(store, "newword"), ["9-7", "9-6"]);
    assert.deepEqual(await foundIds(store, "oldword"), ["9-3", "9-2", "9-1"]);
  } finally {
    await store.close();
  }
  // The race the mark must close: the worker reads rows 6 and 7 (past the mark, up to `read_to`, which
  // the server raised before the batch); before the server moves the mark past them, row 7 goes and a
  // new event takes its rowid. Played here step by step: the worker's batch on connections of the
  // test's own, the server's writes and its move of the mark as SQL.
  const db = new DatabaseSync(path.join(dataDir, "fount.db"));
  const index = new DatabaseSync(path.join(dataDir, "fount-search.db"));
  try {
    const insert = db.prepare(
      `INSERT INTO events (id, id_ms, id_seq, indexed_at_ms, event_json, meta_json, emitter_id, channel)
       VALUES (?, 9, ?, 9, ?, '{}', 'dc_kept', '')`,
    );
    insert.run("9-8", 8, JSON.stringify({ text: "readword8" }));
    insert.run("9-9", 9, JSON.stringify({ text: "readword9" }));
    db.exec("UPDATE events_text_mark SET read_to = (SELECT max(rowid) FROM events)");
    const batch = new TextGenerations(index, db, 65_536).indexBatch(1000);
    assert.deepEqual(batch, { done: [], indexedTo: 7, full: false, queuedThrough: Number.MAX_SAFE_INTEGER });
    db.exec("DELETE FROM events WHERE rowid = 7");
    insert.run("9-10", 10, JSON.stringify({ text: "takenword10" }));
    assert.deepEqual(indexMark(dataDir).queued, [7], "the rowid the worker read is queued again");
    db.prepare("UPDATE events_text_mark SET indexed_to = max(indexed_to, ?)").run(batch.indexedTo);
  } finally {
    index.close();
    db.close();
  }
  const reopened = storeIndexingOnSearch(dataDir).store;
  try {
    assert.deepEqual(await foundIds(reopened, "takenword"), ["9-10"]);
    assert.deepEqual(await foundIds(reopened, "readword"), ["9-8"]);
  } finally {
    await reopened.close();
  }
});

test("sqlite: a search index file made anew from scratch holds every event, read from before the mark", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  const options = {
    dataDir,
    searchIndexDelayMs: 3_600_000,
    searchGenerations: { rowsPerGeneration: 7, maintainMs: 3_600_000 },
  };
  const first = openSqliteStorage(options);
  try {
    for (let n = 0; n < 20; n++) await putText(first, n, `wholeword${n}`);
    assert.equal((await foundIds(first, "wholeword")).length, 10);
    // Some past the mark, one queued (a rowid given again).
    await first.deleteEvents("dc_kept", { ms: 9, seq: 19 }, { ms: 9, seq: 19 }, "");
    for (let n = 20; n < 25; n++) await putText(first, n, `wholeword${n}`);
    assert.deepEqual(indexMark(dataDir).queued, [20]);
  } finally {
    await first.close();
  }
  removeIndexFile(path.join(dataDir, "fount-search.db"));
  const store = openSqliteStorage(options);
  try {
    const page = await store.searchEvents(
      { emitterId: "dc_kept", channel: "", text: ["wholeword"] },
      { limit: 100, count: true },
    );
    assert.equal(page.totalCount, 24);
    assert.deepEqual(await foundIds(store, "wholeword19"), []);
    const state = indexState(dataDir);
    assert.equal(
      state.entries.reduce((a, b) => a + b),
      24,
      "each event once, nothing else",
    );
  } finally {
    await store.close();
  }
});

/** Stores `batches` transactions of `perBatch` events made by `make`, `pauseMs` apart (none when 0). */
async function writeEvents(
  store: ReturnType<typeof openSqliteStorage>,
  batches: number,
  perBatch: number,
  make: (seq: number) => EventRecord,
  pauseMs = 0,
): Promise<void> {
  for (let batch = 0; batch < batches; batch++) {
    await store.transaction(async (tx) => {
      for (let n = 0; n < perBatch; n++) await tx.insertEvent(make(batch * perBatch + n), 1_000_000);
    });
    if (pauseMs > 0) await new Promise((r) => setTimeout(r, pauseMs));
  }
}

/** Runs `fn` on a store in a fresh data dir, and closes it. */
async function withFreshStore(
  fn: (store: ReturnType<typeof openSqliteStorage>, dataDir: string) => Promise<void>,
): Promise<void> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  const store = openSqliteStorage({ dataDir });
  try {
    await fn(store, dataDir);
  } finally {
    await store.close();
  }
}

test("sqlite: the WAL starts over while the server keeps writing, before the server's own checkpoint would", () =>
  withFreshStore(async (store, dataDir) => {
    // About 16,000 pages in commits a few milliseconds apart, as a prune beside ingest writes them. A
    // write starts the WAL over only when it begins with every frame copied: with one checkpoint pass a
    // turn, a pass nearly always ended with frames written during it, and the WAL grew to the server's
    // backstop (10,000 pages), checkpointed inside a commit on the event loop. The bulk is in the
    // events' meta, which the search does not index: the worker's indexing batches stay short and
    // leave its checkpoint turns on time.
    const bulk = "x".repeat(3000);
    await writeEvents(store, 500, 30, (seq) => ({ ...event(seq), meta: { ...event(seq).meta, bulk } }), 3);
    // The WAL file keeps the length it reached (each frame a page of 4,096 bytes and a 24-byte header).
    const pages = Math.round(statSync(path.join(dataDir, "fount.db-wal")).size / 4120);
    assert.ok(pages < 8000, `the WAL started over before 8,000 pages: it reached ${pages}`);
  }));

test("sqlite: the store's worker thread checkpoints the WAL into the database file, so no commit of the server's has to", () =>
  withFreshStore(async (store, dataDir) => {
    const file = path.join(dataDir, "fount.db");
    // About 6 MB of events: 1,500 pages, past SQLite's default checkpoint (1,000) and well below the
    // server connection's backstop (10,000), so only the worker moves them into the file.
    const text = "x".repeat(400);
    await writeEvents(store, 15, 1000, (seq) => ({ ...event(seq), event: { text, seq } }));
    for (let tries = 0; statSync(file).size < 5_000_000; tries++) {
      assert.ok(
        tries < 300,
        `the events reached the database file within 30 s: ${statSync(file).size} bytes`,
      );
      await new Promise((r) => setTimeout(r, 100));
    }
  }));

test("sqlite: a search runs on a thread of its own: the store goes on storing while a long one runs, and it finds what was stored before it only", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  const store = openSqliteStorage({ dataDir });
  const named = (n: number, word: string): EventRecord => ({ ...event(n), id: `9-${n}`, event: { n, word } });
  try {
    // A word every event holds, counted: the search walks every one of them (tens of milliseconds).
    const held = 40_000;
    await store.transaction(async (tx) => {
      for (let n = 0; n < held; n++) await tx.insertEvent(named(n, "jane"));
    });
    const find = (word: string) =>
      store.searchEvents({ emitterId: "dc_kept", channel: "", text: [word] }, { limit: 10, count: true });
    // The first search indexes every event first.
    assert.equal((await find("jane")).totalCount, held);
    let answered = false;
    const searching = find("jane").finally(() => {
      answered = true;
    });
    let stored = 0;
    // Each write on a turn of its own, as a server's come in: the search's answer is a message from its
    // thread, which a loop of writes never leaving the microtask queue would hold back.
    while (!answered && stored < 100_000) {
      await new Promise((resolve) => setImmediate(resolve));
      await store.insertEvent(named(held + stored++, "bob"));
    }
    const page = await searching;
    // Under the lock the whole search long, a store wrote one or two events meanwhile.
    assert.ok(stored >= 10, `events stored while the search ran: ${stored}`);
    assert.equal(page.totalCount, held);
    assert.deepEqual(
      page.items.map((e) => e.idSeq),
      Array.from({ length: 10 }, (_, i) => held - 1 - i),
    );
    assert.equal((await find("bob")).totalCount, stored);
  } finally {
    await store.close();
  }
});

test("sqlite: a search thread idle for its idle time is stopped, and the next read starts another", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  await openSqliteStorage({ dataDir }).close();
  const file = path.join(dataDir, "fount.db");
  const threads = new SearchThreads(file, indexFileOf(file), { idleMs: 50 });
  const backlog = () => threads.read({ kind: "backlog", nowMs: 0 }, (begin) => begin());
  try {
    assert.deepEqual(await backlog(), { pending: 0, due: 0 });
    assert.equal(threads.running, 1);
    for (let tries = 0; threads.running > 0; tries++) {
      assert.ok(tries < 200, "the idle thread stopped within 10 s");
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    assert.deepEqual(await backlog(), { pending: 0, due: 0 });
    assert.equal(threads.running, 1);
  } finally {
    await threads.close();
  }
});

/** A store file with its index, and the search threads over it. */
async function searchThreadsOf(options: { threads?: number } = {}) {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  await openSqliteStorage({ dataDir }).close();
  const file = path.join(dataDir, "fount.db");
  return new SearchThreads(file, indexFileOf(file), options);
}

/** Settles with `p`'s outcome, or with "pending" when it has not settled within 10 s. */
const within10s = (p: Promise<unknown>) =>
  Promise.race([
    p.then(
      () => "resolved",
      (err: { code?: string }) => `rejected: ${err.code}`,
    ),
    new Promise((resolve) => setTimeout(resolve, 10_000, "pending")).then(() => "pending"),
  ]);

test("sqlite: a read whose thread stopped before its snapshot fails at once as store_unavailable, never waits", async () => {
  const threads = await searchThreadsOf();
  const backlog = (snapshot: (begin: () => Promise<void>) => Promise<void>) =>
    threads.read({ kind: "backlog", nowMs: 0 }, snapshot);
  assert.deepEqual(await backlog((begin) => begin()), { pending: 0, due: 0 });
  // The read holds the idle thread and waits for its turn (as at the store's lock) while the threads
  // close: its snapshot fails at once, where posting to the stopped thread never had an answer.
  let turn!: () => void;
  const myTurn = new Promise<void>((resolve) => (turn = resolve));
  const read = within10s(
    backlog(async (begin) => {
      await myTurn;
      await begin();
    }),
  );
  await threads.close();
  turn();
  assert.equal(await read, "rejected: store_unavailable");
  assert.equal(await within10s(backlog((begin) => begin())), "rejected: store_unavailable");
});

test("sqlite: a search thread that crashes fails its read and is replaced once, within the threads' maximum", async () => {
  // Every search thread started, to crash one as an uncaught error in it would.
  const require = createRequire(import.meta.url);
  const threadsModule = require("node:worker_threads") as { Worker: typeof Worker };
  const Original = threadsModule.Worker;
  const started: Worker[] = [];
  threadsModule.Worker = class extends Original {
    constructor(...args: ConstructorParameters<typeof Worker>) {
      super(...args);
      if (String(args[0]).includes("search-worker")) started.push(this);
    }
  };
  syncBuiltinESMExports();
  const threads = await searchThreadsOf({ threads: 2 });
  try {
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const read = () =>
      within10s(
        threads.read({ kind: "backlog", nowMs: 0 }, async (begin) => {
          await gate;
          await begin();
        }),
      );
    // Two reads hold both threads, waiting at the gate; two more wait for a thread.
    const holding = [read(), read()];
    for (let tries = 0; started.length < 2 || threads.running < 2; tries++) {
      assert.ok(tries < 200, "both threads started");
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const waiting = [read(), read()];
    // Within 10 s, or the test fails rather than wait for ever.
    const crashed = within10s(new Promise((resolve) => started[0]!.on("exit", resolve)));
    started[0]!.postMessage(null);
    assert.equal(await crashed, "resolved");
    // One crash ("error", then "exit"): one new thread for one waiting read, not one for each event.
    assert.equal(started.length, 3);
    assert.equal(threads.running, 2);
    open();
    assert.deepEqual(await Promise.all([...holding, ...waiting]), [
      "rejected: store_unavailable",
      "resolved",
      "resolved",
      "resolved",
    ]);
    assert.equal(started.length, 3);
  } finally {
    threadsModule.Worker = Original;
    syncBuiltinESMExports();
    await threads.close();
  }
});

test("sqlite: a search that runs past its time on its thread is stopped, and answers store_unavailable", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  const store = openSqliteStorage({ dataDir });
  const search = { emitterId: "dc_kept", channel: "", text: ["jane"] };
  try {
    // A word every one of 40,000 events holds, counted: tens of milliseconds on its thread.
    await store.transaction(async (tx) => {
      for (let n = 0; n < 40_000; n++) await tx.insertEvent({ ...event(n), event: { n, word: "jane" } });
    });
    // Indexed by the store's own first search.
    assert.equal((await store.searchEvents(search, { limit: 1, count: true })).totalCount, 40_000);
  } finally {
    await store.close();
  }
  const file = path.join(dataDir, "fount.db");
  const threads = new SearchThreads(file, indexFileOf(file), { readTimeoutMs: 1 });
  try {
    const read = threads.read({ kind: "events", search, page: { limit: 1, count: true } }, (begin) =>
      begin(),
    );
    await assert.rejects(read, (err: { code?: string; message: string }) => {
      assert.equal(err.code, "store_unavailable");
      assert.match(err.message, /took longer than 0\.001 s/);
      return true;
    });
    assert.equal(threads.running, 0, "the stopped thread is not kept");
  } finally {
    await threads.close();
  }
});

test("sqlite: searches that meet a backlog to index wait for the one catching up instead of indexing it again", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  const store = openSqliteStorage({ dataDir, searchIndexDelayMs: 3_600_000 });
  const backlog = 20_000;
  // The index's worker is asked for batches of at most 1,000 rows ({id, limit}); search threads get other messages.
  let batches = 0;
  const post = Worker.prototype.postMessage;
  Worker.prototype.postMessage = function (this: Worker, message: unknown, ...rest: any[]) {
    if (typeof message === "object" && message !== null && "limit" in message) batches++;
    return post.call(this, message, ...rest);
  };
  try {
    await store.transaction(async (tx) => {
      for (let n = 0; n < backlog; n++)
        await tx.insertEvent({ ...event(n), id: `9-${n}`, event: { n, word: "kim" } });
    });
    const find = () =>
      store.searchEvents({ emitterId: "dc_kept", channel: "", text: ["kim"] }, { limit: 1, count: true });
    const pages = await Promise.all([find(), find(), find()]);
    assert.deepEqual(
      pages.map((p) => p.totalCount),
      [backlog, backlog, backlog],
    );
    // Once through the backlog (20 full batches, and a short one or two for each search's last look), not
    // again for each search (29 batches here without waiting for the one under way).
    assert.ok(batches <= backlog / 1000 + 5, `batches asked of the index's worker: ${batches}`);
  } finally {
    Worker.prototype.postMessage = post;
    await store.close();
  }
});
