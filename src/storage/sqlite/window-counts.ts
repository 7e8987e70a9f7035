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
  readonly #counts = new BoundedCache<string, { n: number }>(maxCachedRows);

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
   * Adds `n` (negative: removes) to a window's count, after the statement that changed it succeeded; a
   * window not counted yet stays so (its first `of` counts the rows, these included).
   */
  add(emitterId: string, channel: string, n: number): void {
    const entry = this.#counts.get(`${emitterId}\0${channel}`);
    if (entry) entry.n += n;
  }

  /** Forgets every window (events were deleted, or a transaction rolled back). */
  clear(): void {
    this.#counts.clear();
  }
}
