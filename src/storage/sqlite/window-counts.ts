/**
 * SQLite only: how many events each `emitter\0channel` window holds, counted once and then kept up to
 * date by this connection's inserts and prunes (events.ts), so that listing a window of a million
 * events and pruning it never count its rows again. This connection is the only writer of `events`
 * (`fount admin` on the same file writes accounts only). Range deletes, source deletes and rollbacks
 * forget the counts. PostgreSQL, whose windows several processes may write, counts in SQL.
 */
import { BoundedCache } from "../../bounded-cache.ts";
import { maxCachedRows } from "./row-cache.ts";
import type { Sql } from "./sql.ts";

/** The known windows' sizes. */
export class WindowCounts {
  readonly #counts = new BoundedCache<string, { n: number; rows?: number[] | undefined }>(maxCachedRows);

  /** How many events a window holds (counted on first use). */
  of(q: Sql, emitterId: string, channel: string): number {
    return this.#counts.getOrSet(`${emitterId}\0${channel}`, () => ({
      n: q.count("SELECT count(*) AS n FROM events WHERE emitter_id = ? AND channel = ?", [
        emitterId,
        channel,
      ]),
    })).n;
  }

  /**
   * The rowids of a window rewritten in place, oldest event first (read when first asked, kept by
   * `rotate`), so that a rewrite finds its row without a query: for windows of up to 100 (events.ts).
   */
  oldestFirst(q: Sql, emitterId: string, channel: string): number[] {
    this.of(q, emitterId, channel);
    const entry = this.#counts.get(`${emitterId}\0${channel}`)!;
    entry.rows ??= q.all(
      "SELECT rowid AS r FROM events WHERE emitter_id = ? AND channel = ? ORDER BY id_ms, id_seq",
      [emitterId, channel],
      (r) => r.r as number,
    );
    return entry.rows;
  }

  /**
   * Adds `n` (negative: removes) to a window's count, after the statement that changed it succeeded; a
   * window not counted yet stays so (its first `of` counts the rows, these included).
   */
  add(emitterId: string, channel: string, n: number): void {
    const entry = this.#counts.get(`${emitterId}\0${channel}`);
    if (!entry) return;
    entry.n += n;
    entry.rows = undefined;
  }

  /** Forgets every window (events were deleted, or a transaction rolled back). */
  clear(): void {
    this.#counts.clear();
  }
}
