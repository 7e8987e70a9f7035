import assert from "node:assert/strict";
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { DatabaseSync } from "node:sqlite";
import { test } from "node:test";
import type { EventRecord } from "../../src/domain/types.ts";
import { openSqliteStorage } from "../../src/storage/sqlite/driver.ts";
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

/** The IDs the FTS index (in its own file) finds for `text`, read on a connection of its own (a search would catch up first). */
function indexedIds(dataDir: string, text: string): string[] | undefined {
  const db = new DatabaseSync(path.join(dataDir, "fount.db"), { readOnly: true });
  db.prepare("ATTACH DATABASE ? AS search").run(path.join(dataDir, "fount-search.db"));
  try {
    const queued = (db.prepare("SELECT count(*) AS n FROM events_text_queue").get() as { n: number }).n;
    if (queued > 0) return undefined;
    return (
      db
        .prepare(
          "SELECT e.id FROM events_text JOIN events e ON e.rowid = events_text.rowid WHERE events_text MATCH ? ORDER BY e.id",
        )
        .all(`"${text}"`) as Array<{ id: string }>
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

test("sqlite: a search index file of another store is not used: the store makes its own and searches stay exact", async () => {
  const search = (store: ReturnType<typeof openSqliteStorage>, text: string) =>
    store
      .searchEvents({ emitterId: "dc_kept", channel: "", text: [text] }, { limit: 10 })
      .then((page) => page.items.map((e) => e.id));
  const dirs = [0, 1].map(() => mkdtempSync(path.join(os.tmpdir(), "fount-store-")));
  const words = ["alphaword", "betaword"];
  for (const [i, dataDir] of dirs.entries()) {
    const store = openSqliteStorage({ dataDir });
    try {
      // The same rowids in both stores, with other text.
      for (let n = 0; n < 3; n++) await store.insertEvent({ ...event(n), event: { text: words[i] } }, 10);
      assert.deepEqual(await search(store, words[i]!), ["9-2", "9-1", "9-0"]);
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
    assert.deepEqual(await search(store, "alphaword"), [], "nothing of the other store's index is found");
    assert.deepEqual(await search(store, "betaword"), ["9-2", "9-1", "9-0"]);
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
