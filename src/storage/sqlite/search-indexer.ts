/**
 * Keeps the event search's FTS5 index up to date off the commit path and off the event loop. The index
 * lives in a file of its own beside the store (`fount-search.db`, migration 020), written only by a
 * worker thread (store-worker.ts, which also checkpoints the store's WAL). Storing, overwriting or deleting an event only queues its
 * rowid (a trigger, in the writer's transaction); the worker indexes the queued rowids in batches a
 * short while after they were written, and all of them before every search, so that a search is exact:
 * an event is found as soon as its emit is acknowledged, and an overwritten or deleted one no longer is.
 *
 * A rowid is indexed with its row's text at that time, so a window's slot overwritten several times
 * between two batches is tokenized once (docs/architecture.md, "Performance").
 */
import { randomBytes } from "node:crypto";
import { chmodSync, rmSync } from "node:fs";
import { DatabaseSync } from "node:sqlite";
import { Worker } from "node:worker_threads";
import type { AsyncLock } from "../../async-lock.ts";
import { indexFileSchema } from "./search-generations.ts";
import { inWriteTransaction, type Sql } from "./sql.ts";
import type { IndexReply, IndexRequest, IndexWorkerData } from "./store-worker.ts";

/**
 * Rowids indexed per batch. The worker holds no lock of the store's, so a batch can be large: fewer,
 * larger FTS5 segments to merge later.
 */
const batchSize = 1000;

/** How often the worker checkpoints the store's WAL (store-worker.ts). */
const checkpointMs = 200;

/** How the index's generations are kept (search-generations.ts); tests make them small and quick. */
export interface GenerationOptions {
  /** Entries of the newest generation before the next begins. */
  rowsPerGeneration?: number;
  /** How often generations whose events are gone are dropped or moved out of. */
  maintainMs?: number;
}

/** Queued rowids a search lets the worker index without holding the store's lock first. */
const lockedCatchUpAtMost = 2 * batchSize;

/** The index file beside a store file: `fount.db` → `fount-search.db`. */
export function indexFileOf(storeFile: string): string {
  return `${storeFile.replace(/\.db$/, "")}-search.db`;
}

/** Removes an index file with its WAL and shared-memory files. */
export function removeIndexFile(indexFile: string): void {
  for (const suffix of ["", "-wal", "-shm"]) rmSync(indexFile + suffix, { force: true });
}

/**
 * Makes sure the index file is this store's: a missing file, or one written for another store or an
 * older copy of this one (its token differs from the store's), is made anew and every event queued.
 */
function prepareIndexFile(q: Sql, indexFile: string): void {
  const token = q.get("SELECT token FROM search_index WHERE id = 1", [], (r) => r.token as string);
  let current = false;
  if (token !== undefined) {
    let file: DatabaseSync | undefined;
    try {
      file = new DatabaseSync(indexFile, { readOnly: true });
      const row = file.prepare("SELECT token FROM search_index_of WHERE id = 1").get() as
        | { token: string }
        | undefined;
      // A file from before the index's generations has no `text_generations`: made anew too.
      file.prepare("SELECT count(*) FROM text_generations").get();
      current = row?.token === token;
    } catch {
      // No file, or not an index file: made anew below.
    } finally {
      file?.close();
    }
  }
  if (current) return;
  const fresh = randomBytes(16).toString("hex");
  removeIndexFile(indexFile);
  const file = new DatabaseSync(indexFile);
  try {
    file.exec(`PRAGMA journal_mode = WAL; ${indexFileSchema}`);
    file.prepare("INSERT INTO search_index_of (id, token) VALUES (1, ?)").run(fresh);
  } finally {
    file.close();
  }
  for (const suffix of ["", "-wal", "-shm"]) {
    try {
      chmodSync(indexFile + suffix, 0o600);
    } catch {
      // -wal/-shm exist only while a connection has the file open.
    }
  }
  inWriteTransaction(q.db, () => {
    q.run(
      `INSERT INTO events_text_queue (event_rowid) SELECT rowid FROM events WHERE true
         ON CONFLICT (event_rowid) DO UPDATE SET changes = changes + 1`,
      [],
    );
    q.run(
      "INSERT INTO search_index (id, token) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET token = excluded.token",
      [fresh],
    );
  });
}

/** The queued rowids of the event search's index, and the worker that indexes them. */
export class SearchIndexer {
  readonly #q: Sql;
  readonly #data: IndexWorkerData;
  #worker: Worker | undefined;
  #nextId = 1;
  readonly #waiting = new Map<
    number,
    { resolve: (d: Array<[number, number]>) => void; reject: (e: Error) => void }
  >();
  #timer: NodeJS.Timeout | undefined;
  #running = false;
  #stopped = false;

  constructor(q: Sql, storeFile: string, indexFile: string, generations: GenerationOptions = {}) {
    this.#q = q;
    this.#data = {
      storeFile,
      indexFile,
      checkpointMs,
      rowsPerGeneration: generations.rowsPerGeneration ?? 65_536,
      maintainMs: generations.maintainMs ?? 10_000,
    };
    prepareIndexFile(q, indexFile);
  }

  /** The worker, started on first use and again after it failed. */
  #thread(): Worker {
    if (this.#worker) return this.#worker;
    const worker = new Worker(new URL("./store-worker.ts", import.meta.url), {
      workerData: this.#data,
    });
    worker.unref();
    worker.on("message", (reply: IndexReply) => {
      const waiting = this.#waiting.get(reply.id);
      this.#waiting.delete(reply.id);
      if (!waiting) return;
      if ("error" in reply) waiting.reject(new Error(`The search index: ${reply.error}`));
      else waiting.resolve(reply.done);
    });
    const fail = (err: Error) => {
      if (this.#worker === worker) this.#worker = undefined;
      for (const w of this.#waiting.values()) w.reject(err);
      this.#waiting.clear();
    };
    worker.on("error", fail);
    worker.on("exit", (code) => fail(new Error(`The search index's worker stopped (${code})`)));
    this.#worker = worker;
    return worker;
  }

  /** Has the worker index up to `limit` queued rowids; the `[rowid, changes]` pairs it indexed. */
  #indexBatch(limit = batchSize): Promise<Array<[number, number]>> {
    if (this.#stopped) return Promise.reject(new Error("The store is closed"));
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#waiting.set(id, { resolve, reject });
      this.#thread().postMessage({ id, limit } satisfies IndexRequest);
    });
  }

  /**
   * Forgets the queue entries the worker indexed, unless their row changed since it read them (then
   * they stay queued and are indexed again). Inside the caller's transaction, if one is open.
   */
  #forget(done: Array<[number, number]>): void {
    if (done.length === 0) return;
    const q = this.#q;
    inWriteTransaction(q.db, () =>
      q.run(
        `DELETE FROM events_text_queue WHERE (event_rowid, changes) IN
           (SELECT value ->> 0, value ->> 1 FROM json_each(?))`,
        [JSON.stringify(done)],
      ),
    );
  }

  /** Whether more than `n` rowids are queued. */
  #queuedOver(n: number): boolean {
    return this.#q.get("SELECT 1 AS over FROM events_text_queue LIMIT 1 OFFSET ?", [n], () => true) ?? false;
  }

  /**
   * Indexes until at most a couple of batches are queued, without holding the store's lock while the
   * worker works (a search after a bulk load or an upgrade must not stop every emit meanwhile).
   */
  async approach(lock: AsyncLock): Promise<void> {
    while (await lock.run(() => this.#queuedOver(lockedCatchUpAtMost))) {
      const done = await this.#indexBatch();
      await lock.run(() => this.#forget(done));
    }
  }

  /** Indexes every queued rowid (before a search; the caller holds the lock, so nothing is queued meanwhile). */
  async catchUp(): Promise<void> {
    for (;;) {
      const done = await this.#indexBatch();
      this.#forget(done);
      if (done.length < batchSize) return;
    }
  }

  /**
   * Indexes what was queued every `intervalMs`, batch after batch until the queue is empty; each batch's
   * queue entries are forgotten in a turn of the lock. Stops at `stop`.
   */
  start(lock: AsyncLock, db: DatabaseSync, intervalMs: number): void {
    const run = async () => {
      // A worker that failed is started again: it also checkpoints the store's WAL.
      if (!this.#stopped) this.#thread();
      // Nothing queued: the worker is not woken.
      if (this.#running || !db.isOpen || !this.#queuedOver(0)) return;
      this.#running = true;
      try {
        while (this.#timer) {
          const done = await this.#indexBatch();
          await lock.run(() => (db.isOpen ? this.#forget(done) : undefined));
          if (done.length < batchSize) break;
        }
      } finally {
        this.#running = false;
      }
    };
    // Started now: it checkpoints the store's WAL from the start.
    this.#thread();
    // A failed batch stays queued: the next run retries it, and the next search reports the error.
    this.#timer = setInterval(() => void run().catch(() => undefined), Math.min(intervalMs, 2 ** 31 - 1));
    this.#timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#stopped = true;
    await this.#worker?.terminate();
  }
}
