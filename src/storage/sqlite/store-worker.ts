/**
 * The SQLite store's worker thread (search-indexer.ts starts it with the store), for the two jobs that
 * would otherwise stall the server's event loop and every emit behind it:
 *
 * - The event search's index file. The worker reads the queued rowids and the rows past the index's
 *   mark with their events' current text from the store (in WAL mode a reader neither waits for the
 *   server's writes nor holds them up) and indexes them in the index file, one transaction a batch. It
 *   answers each batch with the `[rowid, changes]` pairs of the queue it indexed and where the mark may
 *   move; the server then removes those queue entries whose change count is still the same, and moves
 *   the mark. The index is kept in generations (search-generations.ts), which the worker drops
 *   whole once their events are gone, on a timer of their own.
 * - The store's WAL checkpoints. SQLite copies the WAL back into the database file (and syncs it) inside
 *   the COMMIT that finds the WAL over its threshold: on the server's thread, 15 to 50 ms at a time after
 *   a bulk of writes. The server's connection leaves that to this thread (PASSIVE checkpoints every
 *   `checkpointMs`, which never block the writer, repeated for what the server wrote meanwhile so that
 *   the WAL can start over, and a FULL one for the last few frames when that does not catch up) and
 *   keeps its own only as a backstop, at a WAL ten times larger.
 */
import { chmodSync } from "node:fs";
import { DatabaseSync } from "node:sqlite";
import { parentPort, workerData } from "node:worker_threads";
import { type BatchLimits, type IndexedBatch, TextGenerations } from "./search-generations.ts";

export interface IndexWorkerData {
  storeFile: string;
  indexFile: string;
  /** How often the store's WAL is checkpointed. */
  checkpointMs: number;
  /** Entries of the index's newest generation before the next begins (search-generations.ts). */
  rowsPerGeneration: number;
  /** How often generations whose rows are gone are dropped or moved out of. */
  maintainMs: number;
}

export interface IndexRequest extends BatchLimits {
  id: number;
  limit: number;
}

export type IndexReply = ({ id: number } & IndexedBatch) | { id: number; error: string };

const { storeFile, indexFile, checkpointMs, rowsPerGeneration, maintainMs } = workerData as IndexWorkerData;
// Read-write for the checkpoints only: this connection never writes a row of the store.
const store = new DatabaseSync(storeFile);
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

const generations = new TextGenerations(index, store, rowsPerGeneration);

// PASSIVE: copies what no reader still needs, without waiting for a lock or holding the writer up.
const checkpoint = store.prepare("PRAGMA wal_checkpoint(PASSIVE)");

/**
 * Passes a turn may add after its first, each for the frames the server wrote while the one before
 * copied. The WAL starts over from its beginning only when the server begins a write with every frame
 * already copied, and with writes every few milliseconds one pass of 10 to 60 ms nearly always ends
 * with some new: the WAL then grew to the server's backstop (10,000 pages), whose checkpoint ran inside
 * a COMMIT on the event loop (about 50 ms each time while the pruner deleted). The later passes copy
 * only those few frames, so a turn mostly ends with none left (docs/architecture.md, "Event windows for
 * retention").
 */
const tailPasses = 4;

/**
 * A WAL this long that the tail passes could not catch up with (the server writing without pauses as
 * long as a pass) gets one FULL checkpoint a turn: it takes the write lock in a gap between the server's
 * transactions, if there is one right then (no wait: a busy timeout of 0), and copies the few frames
 * left, so that the next write starts the WAL over. The server's writes wait for it meanwhile, a few
 * milliseconds, instead of its own checkpoint at 10,000 pages. With no wait it never holds the write
 * lock while a long read keeps old frames needed: it copies what it can and gives up.
 */
const fullAt = 4000;
const full = store.prepare("PRAGMA wal_checkpoint(FULL)");

setInterval(() => {
  try {
    let last = checkpoint.get() as { log: number };
    let copied = false;
    for (let i = 0; i < tailPasses && !copied; i++) {
      const next = checkpoint.get() as { log: number };
      // Nothing written since the last pass began (or the WAL started over): every frame is copied.
      copied = next.log <= last.log;
      last = next;
    }
    if (!copied && last.log >= fullAt) {
      store.exec("PRAGMA busy_timeout = 0");
      try {
        full.get();
      } finally {
        store.exec("PRAGMA busy_timeout = 5000");
      }
    }
  } catch {
    // Busy (a checkpoint of the server's backstop under way) or the file going away at close: next turn.
  }
}, checkpointMs);

setInterval(() => {
  try {
    generations.maintain();
  } catch {
    // Busy (another process writing the index file) or the file going away at close: next turn.
  }
}, maintainMs);

parentPort!.on("message", (m: IndexRequest) => {
  let reply: IndexReply;
  try {
    const { id, limit, ...limits } = m;
    reply = { id, ...generations.indexBatch(limit, limits) };
  } catch (err) {
    reply = { id: m.id, error: (err as Error).message };
  }
  parentPort!.postMessage(reply);
});
