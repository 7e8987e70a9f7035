/**
 * Keeps the event search's FTS5 index (migrations 014 and 019) up to date off the commit path. Storing,
 * overwriting or deleting an event only queues its rowid (a trigger, in the writer's transaction); this
 * indexes the queued rowids in batches, each in a transaction of its own under the driver's lock, a short
 * while after they were written, and all of them before every search (so a search is exact: an event is
 * found as soon as its emit is acknowledged, and an overwritten or deleted one no longer is).
 *
 * A rowid is indexed with the events table's text at that time, so a window's slot overwritten several
 * times between two runs is tokenized once; its old text, which an external-content FTS5 table needs in
 * order to remove it, is the one the queue kept (docs/architecture.md, "Performance").
 */
import type { DatabaseSync } from "node:sqlite";
import type { AsyncLock } from "../../async-lock.ts";
import type { Sql } from "./sql.ts";

/** Rowids indexed per transaction: a few milliseconds of the lock, so that emits wait little. */
const batchSize = 200;

/**
 * Index pages merged after each batch. FTS5 merges its segments on its own (`automerge`), and at a
 * million events one such merge took up to 0.73 s inside one batch (p99 134 ms over 5,000 batches), which
 * every emit waiting for the lock paid. With automatic merges off and this many pages merged after each
 * batch, the longest batch was 138 ms (p99 66 ms) for 8 % more indexing time in all, and a search 45
 * instead of 34 ms (docs/architecture.md, "Performance"). `crisismerge` is raised so that FTS5 does not
 * merge a whole level at once before these small steps have.
 */
const mergePages = 100;

/** The queued rowids of the event search's index, and their indexing. */
export class SearchIndexer {
  readonly #q: Sql;
  #timer: NodeJS.Timeout | undefined;
  #running = false;

  constructor(q: Sql) {
    this.#q = q;
    // Kept in the index's own config table: set at each open, the same values whoever opens the file.
    q.db.exec(
      "INSERT INTO events_text (events_text, rank) VALUES ('automerge', 0); " +
        "INSERT INTO events_text (events_text, rank) VALUES ('crisismerge', 200)",
    );
  }

  /** Indexes up to `limit` queued rowids (inside the caller's transaction, if one is open); how many. */
  indexBatch(limit = batchSize): number {
    const q = this.#q;
    if (!q.get("SELECT 1 AS queued FROM events_text_queue LIMIT 1", [], () => true)) return 0;
    // The queue is read inside the write transaction: another process on the file (a CLI command) may
    // index the same rowids, and a rowid deleted from the index with a text it no longer holds would
    // corrupt it.
    const own = !q.db.isTransaction;
    if (own) q.db.exec("BEGIN IMMEDIATE");
    try {
      const queued = q.all(
        "SELECT event_rowid, indexed_json FROM events_text_queue ORDER BY event_rowid LIMIT ?",
        [limit],
        (r) => ({ rowid: r.event_rowid as number, indexed: r.indexed_json as string | null }),
      );
      for (const { rowid, indexed } of queued) {
        if (indexed !== null)
          q.run("INSERT INTO events_text (events_text, rowid, event_json) VALUES ('delete', ?, ?)", [
            rowid,
            indexed,
          ]);
        q.run(
          "INSERT INTO events_text (rowid, event_json) SELECT rowid, event_json FROM events WHERE rowid = ?",
          [rowid],
        );
        q.run("DELETE FROM events_text_queue WHERE event_rowid = ?", [rowid]);
      }
      q.run("INSERT INTO events_text (events_text, rank) VALUES ('merge', ?)", [mergePages]);
      if (own) q.db.exec("COMMIT");
      return queued.length;
    } catch (err) {
      if (own) q.db.exec("ROLLBACK");
      throw err;
    }
  }

  /** Indexes every queued rowid (before a search; the caller holds the lock). */
  catchUp(): void {
    while (this.indexBatch() === batchSize);
  }

  /**
   * Indexes what was queued every `intervalMs`, a batch per turn of the lock, so that writers queued
   * behind it go between two batches. Stops at `stop`.
   */
  start(lock: AsyncLock, db: DatabaseSync, intervalMs: number): void {
    const run = async () => {
      if (this.#running || !db.isOpen) return;
      this.#running = true;
      try {
        while (this.#timer && (await lock.run(() => (db.isOpen ? this.indexBatch() : 0))) === batchSize);
      } finally {
        this.#running = false;
      }
    };
    // A failed batch stays queued: the next run retries it, and the next search reports the error.
    this.#timer = setInterval(() => void run().catch(() => undefined), Math.min(intervalMs, 2 ** 31 - 1));
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }
}
