/**
 * Keeps the event search's FTS5 index up to date off the commit path and off the event loop. The index
 * lives in a file of its own beside the store (`fount-search.db`, migration 020), written only by a
 * worker thread (store-worker.ts, which also checkpoints the store's WAL). The worker indexes new rows
 * from a mark (migration 022): every row past `indexed_to`, read with its text on its own connection, a
 * short while after it was written; the server then moves the mark up to where it read. Storing a row
 * costs the server nothing more. Only a rewrite in place (a window's slot) and a row given a rowid the
 * worker may have read already (at or below `read_to`) queue their rowid (a trigger, in the writer's
 * transaction). Everything waiting when a search begins is indexed before it takes its snapshot, so that
 * a search is exact: an event is found as soon as its emit is acknowledged, and an overwritten one by its
 * new text only. That indexing runs without the store's lock, however much text it holds; under the
 * lock a search indexes one short batch at most (`beforeSearch`).
 *
 * A rowid is indexed with its row's text at that time, so a window's slot overwritten several times
 * between two batches is tokenized once (docs/architecture.md, "Performance").
 */
import { randomBytes } from "node:crypto";
import { chmodSync, rmSync } from "node:fs";
import { DatabaseSync } from "node:sqlite";
import { Worker } from "node:worker_threads";
import type { AsyncLock } from "../../async-lock.ts";
import {
  type BatchLimits,
  type IndexedBatch,
  indexFileFormat,
  indexFileSchema,
} from "./search-generations.ts";
import { inWriteTransaction, type Sql } from "./sql.ts";
import type { IndexReply, IndexRequest, IndexWorkerData } from "./store-worker.ts";

/**
 * Rows indexed per batch. The worker holds no lock of the store's, so a batch can be large: fewer,
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

/**
 * Characters a search's batch under the store's lock reads at most: about 80 ms of the worker's time (a
 * MiB of random words), while every emit and API write waits. The lock's turn indexed every row waiting
 * before: a tenant's 2,000 events of 1 MiB held it 160 s.
 */
const lockedBatchChars = 1024 * 1024;

/**
 * Turns of the lock a search takes at most to index what was stored since it began (each after indexing
 * what waits without the lock): past them it takes its snapshot with that still waiting, which it need
 * not find. Only a store written faster than a batch under the lock indexes gets there.
 */
const lockedTurns = 3;

/** The index file beside a store file: `fount.db` → `fount-search.db`. */
export function indexFileOf(storeFile: string): string {
  return `${storeFile.replace(/\.db$/, "")}-search.db`;
}

/** Removes an index file with its WAL and shared-memory files. */
export function removeIndexFile(indexFile: string): void {
  for (const suffix of ["", "-wal", "-shm"]) rmSync(indexFile + suffix, { force: true });
}

/**
 * Makes sure the index file is this store's: a missing file, one written for another store or an
 * older copy of this one (its token differs from the store's), or one of another layout (its format), is
 * made anew, and the mark goes back
 * below the first row so that the worker reads every event again.
 */
function prepareIndexFile(q: Sql, indexFile: string): void {
  const token = q.get("SELECT token FROM search_index WHERE id = 1", [], (r) => r.token as string);
  let current = false;
  if (token !== undefined) {
    let file: DatabaseSync | undefined;
    try {
      file = new DatabaseSync(indexFile, { readOnly: true });
      // A file from before the format column (one FTS5 table, or generations keeping each trigram's
      // positions) fails here: made anew too.
      const row = file.prepare("SELECT token, format FROM search_index_of WHERE id = 1").get() as
        | { token: string; format: number }
        | undefined;
      current = row?.token === token && row.format === indexFileFormat;
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
    file
      .prepare("INSERT INTO search_index_of (id, token, format) VALUES (1, ?, ?)")
      .run(fresh, indexFileFormat);
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
    // Every stored row is read again by the worker: the mark goes back below the first.
    q.run(
      `UPDATE events_text_mark SET indexed_to = coalesce((SELECT min(rowid) FROM events), 1) - 1
        WHERE id = 1`,
      [],
    );
    q.run(
      "INSERT INTO search_index (id, token) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET token = excluded.token",
      [fresh],
    );
  });
}

/** The queued rowids and the mark of the event search's index, and the worker that indexes them. */
export class SearchIndexer {
  readonly #q: Sql;
  readonly #data: IndexWorkerData;
  #worker: Worker | undefined;
  #nextId = 1;
  readonly #waiting = new Map<number, { resolve: (d: IndexedBatch) => void; reject: (e: Error) => void }>();
  #timer: NodeJS.Timeout | undefined;
  #running = false;
  /** Searches bringing the index up to date, each after the one before (`#inTurn`). */
  #reaching: Promise<unknown> = Promise.resolve();
  /** Searches under way in `beforeSearch`: the timer's indexing leaves the worker to them meanwhile. */
  #searches = 0;
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
      else waiting.resolve(reply);
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

  /**
   * Has the worker index up to `batchSize` rows and `limits.chars` characters, queued ones first, then
   * those past the mark.
   */
  #indexBatch(limits: BatchLimits = {}): Promise<IndexedBatch> {
    if (this.#stopped) return Promise.reject(new Error("The store is closed"));
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#waiting.set(id, { resolve, reject });
      this.#thread().postMessage({ id, limit: batchSize, ...limits } satisfies IndexRequest);
    });
  }

  /**
   * After a batch (and before the first): forgets the queue entries the worker indexed, unless their row
   * changed since it read them (then they stay queued and are indexed again), moves the mark up to where
   * the worker read, and raises `read_to` to the greatest rowid, so that the next batch reads every row
   * stored so far and a row written at or below it from now on is queued (migration 022). One
   * transaction, inside the caller's if one is open; none when nothing changes.
   */
  #settle(batch?: IndexedBatch): void {
    const q = this.#q;
    const mark = q.get(
      `SELECT indexed_to AS lo, read_to AS hi, coalesce((SELECT max(rowid) FROM events), read_to) AS top
         FROM events_text_mark WHERE id = 1`,
      [],
      (r) => ({ lo: r.lo as number, hi: r.hi as number, top: r.top as number }),
    )!;
    const done = batch?.done ?? [];
    const moves = batch !== undefined && batch.indexedTo > mark.lo;
    if (done.length === 0 && !moves && mark.top <= mark.hi) return;
    const lo = moves ? batch.indexedTo : mark.lo;
    inWriteTransaction(q.db, () => {
      if (done.length > 0)
        q.run(
          `DELETE FROM events_text_queue WHERE (event_rowid, changes) IN
             (SELECT value ->> 0, value ->> 1 FROM json_each(?))`,
          [JSON.stringify(done)],
        );
      // max(): another process on the store (`fount admin`) may have moved them meanwhile.
      q.run(
        `UPDATE events_text_mark SET indexed_to = max(indexed_to, ?),
           read_to = max(read_to, coalesce((SELECT max(rowid) FROM events), read_to)) WHERE id = 1`,
        [lo],
      );
    });
  }

  /** Whether more than `n` rows wait for the index: queued, or past the mark. */
  #waitingOver(n: number): boolean {
    return (
      this.#q.get(
        `SELECT 1 AS over FROM (SELECT event_rowid FROM events_text_queue UNION ALL
           SELECT rowid FROM events WHERE rowid > (SELECT indexed_to FROM events_text_mark WHERE id = 1))
         LIMIT 1 OFFSET ?`,
        [n],
        () => true,
      ) ?? false
    );
  }

  /**
   * Brings the index up to date for a search, then runs `snapshot` (the search thread's) under the
   * store's lock. A search must find every event stored before it began, by its text then: the rowids
   * waiting then, up to `read_to` (its target), are indexed without holding the lock, batch after batch,
   * however much text they hold. Then, under the lock, one batch of `lockedBatchChars` at most indexes
   * what was stored since: when that was all, the snapshot and the index agree on every row (a word of
   * three characters is matched by the index alone, not checked on the row), and the snapshot is taken
   * in the same turn. Else the lock is let go, what waits is indexed without it, and the search tries
   * again; after `lockedTurns` it takes its snapshot all the same, having what it must find indexed.
   */
  async beforeSearch(lock: AsyncLock, snapshot: () => Promise<void>): Promise<void> {
    this.#searches++;
    try {
      for (let turn = 1; ; turn++) {
        const target = await lock.run(() => this.#target());
        await this.#inTurn(() => this.#reach(lock, target));
        const taken = await lock.run(async () => {
          if (!(await this.#indexLockedBatch()) && turn < lockedTurns) return false;
          await snapshot();
          return true;
        });
        if (taken) return;
      }
    } finally {
      this.#searches--;
    }
  }

  /**
   * Runs `reach` after the searches before it have reached theirs: each would send the same rows to the
   * worker again (two searches after a bulk load took 2.65 s each against 1.6 s alone), while after
   * another's its own has little left.
   */
  #inTurn(reach: () => Promise<void>): Promise<void> {
    const run = this.#reaching.then(reach);
    this.#reaching = run.catch(() => undefined);
    return run;
  }

  /** Where a search's indexing must reach (under the lock): `read_to`, raised to the greatest rowid. */
  #target(): number {
    this.#settle();
    return this.#q.get("SELECT read_to AS hi FROM events_text_mark WHERE id = 1", [], (r) => r.hi as number)!;
  }

  /**
   * Indexes, without holding the lock (each batch is settled in a short turn of it), every row up to
   * `target` past the mark, and every rowid up to it queued: the queue is swept once in rowid order, so
   * that rowids queued again meanwhile (a window's slot rewritten) are not read again and again.
   */
  async #reach(lock: AsyncLock, target: number): Promise<void> {
    let queuedAfter = Number.MIN_SAFE_INTEGER;
    while (await lock.run(() => this.#waitingUpTo(target, queuedAfter))) {
      const batch = await this.#indexBatch({ queuedAfter, queuedUpTo: target });
      queuedAfter = batch.queuedThrough;
      await lock.run(() => this.#settle(batch));
    }
  }

  /** Whether a rowid up to `target` waits: queued past `queuedAfter`, or a row past the mark. */
  #waitingUpTo(target: number, queuedAfter: number): boolean {
    return this.#q.get(
      `SELECT EXISTS (SELECT 1 FROM events_text_queue WHERE event_rowid > ? AND event_rowid <= ?)
           OR EXISTS (SELECT 1 FROM events WHERE rowid <= ?
                        AND rowid > (SELECT indexed_to FROM events_text_mark WHERE id = 1)) AS waiting`,
      [queuedAfter, target, target],
      (r) => r.waiting === 1,
    )!;
  }

  /**
   * Under the lock: indexes one batch of what waits, `lockedBatchChars` at most. True when nothing is left
   * waiting, so that a snapshot taken now agrees with the index.
   */
  async #indexLockedBatch(): Promise<boolean> {
    this.#settle();
    if (!this.#waitingOver(0)) return true;
    const batch = await this.#indexBatch({ chars: lockedBatchChars });
    this.#settle(batch);
    return !batch.full;
  }

  /**
   * Indexes every row waiting, under the lock the caller holds (a transaction's own search, which no route
   * makes: the store's searches go through `beforeSearch`, which holds the lock for one short batch).
   */
  async catchUp(): Promise<void> {
    this.#settle();
    for (;;) {
      const batch = await this.#indexBatch();
      this.#settle(batch);
      if (!batch.full) return;
    }
  }

  /**
   * Indexes what waits every `intervalMs`, batch after batch until nothing does; each batch is settled in
   * a turn of the lock. Stops at `stop`.
   */
  start(lock: AsyncLock, db: DatabaseSync, intervalMs: number): void {
    const run = async () => {
      // A worker that failed is started again: it also checkpoints the store's WAL.
      if (!this.#stopped) this.#thread();
      // Nothing waiting: the worker is not woken.
      // A search under way indexes what waits itself, and its batch under the lock must not wait for
      // one of these.
      if (this.#running || this.#searches > 0 || !db.isOpen || !this.#waitingOver(0)) return;
      this.#running = true;
      try {
        await lock.run(() => (db.isOpen ? this.#settle() : undefined));
        while (this.#timer && this.#searches === 0) {
          const batch = await this.#indexBatch();
          await lock.run(() => (db.isOpen ? this.#settle(batch) : undefined));
          if (!batch.full) break;
        }
      } finally {
        this.#running = false;
      }
    };
    // Started now: it checkpoints the store's WAL from the start.
    this.#thread();
    // A failed batch stays waiting: the next run retries it, and the next search reports the error.
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
