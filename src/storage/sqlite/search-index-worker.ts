/**
 * The worker thread that writes the event search's index file (search-indexer.ts starts it). It reads
 * the queued rowids and their events' current text from the store on a read-only connection of its
 * own, which in WAL mode neither waits for the server's writes nor holds them up, and indexes them in
 * the index file, one transaction a batch. It answers each batch with the `[rowid, changes]` pairs it
 * indexed; the server then removes those queue entries whose change count is still the same.
 */
import { chmodSync } from "node:fs";
import { DatabaseSync } from "node:sqlite";
import { parentPort, workerData } from "node:worker_threads";

export interface IndexWorkerData {
  storeFile: string;
  indexFile: string;
}

export interface IndexRequest {
  id: number;
  limit: number;
}

export type IndexReply = { id: number; done: Array<[number, number]> } | { id: number; error: string };

const { storeFile, indexFile } = workerData as IndexWorkerData;
const store = new DatabaseSync(storeFile, { readOnly: true });
const index = new DatabaseSync(indexFile);
// FULL: a batch is on disk before the server forgets its queue entries, so a crash never leaves an
// acknowledged change out of the index.
index.exec("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA busy_timeout = 5000");
store.exec("PRAGMA busy_timeout = 5000");
// Like the store's: executors run under other uids and must never read it.
for (const suffix of ["", "-wal", "-shm"]) {
  try {
    chmodSync(indexFile + suffix, 0o600);
  } catch {
    // -shm and -wal exist once the file is open in WAL mode; a missing one is nothing to narrow.
  }
}

const queued = store.prepare(
  `SELECT q.event_rowid AS r, q.changes AS c, e.event_json AS j
     FROM events_text_queue q LEFT JOIN events e ON e.rowid = q.event_rowid
    ORDER BY q.event_rowid LIMIT ?`,
);
const remove = index.prepare("DELETE FROM events_text WHERE rowid = ?");
const add = index.prepare("INSERT INTO events_text (rowid, event_json) VALUES (?, ?)");

function indexBatch(limit: number): Array<[number, number]> {
  const rows = queued.all(limit) as Array<{ r: number; c: number; j: string | null }>;
  if (rows.length === 0) return [];
  index.exec("BEGIN IMMEDIATE");
  try {
    for (const { r, j } of rows) {
      // The table keeps its own copy of each text, so an old entry goes without being told its text.
      remove.run(r);
      if (j !== null) add.run(r, j);
    }
    index.exec("COMMIT");
  } catch (err) {
    index.exec("ROLLBACK");
    throw err;
  }
  return rows.map((row) => [row.r, row.c]);
}

parentPort!.on("message", (m: IndexRequest) => {
  let reply: IndexReply;
  try {
    reply = { id: m.id, done: indexBatch(m.limit) };
  } catch (err) {
    reply = { id: m.id, error: (err as Error).message };
  }
  parentPort!.postMessage(reply);
});
