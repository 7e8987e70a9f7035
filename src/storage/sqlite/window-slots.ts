/**
 * SQLite only: the slots of each `emitter\0channel` event window (migration 004), read once and then
 * kept up to date by this connection's inserts (events.ts), so that storing an event never reads the
 * window. This connection is the only writer of `events` (`fount admin` on the same file writes
 * accounts only). Deletes of ranges and sources, and rollbacks, forget them. PostgreSQL, whose windows
 * several processes may write, keeps nothing of a window in memory (postgres/events.ts).
 */
import { BoundedCache } from "../../bounded-cache.ts";
import { maxCachedRows } from "./row-cache.ts";
import type { Sql } from "./sql.ts";

/** The known windows' slots, oldest event first. */
export class WindowSlots {
  readonly #windows = new BoundedCache<string, number[]>(maxCachedRows);

  /** The slots of a window's events, oldest first (read from `events` on first use). */
  of(q: Sql, emitterId: string, channel: string): number[] {
    return this.#windows.getOrSet(`${emitterId}\0${channel}`, () =>
      q.all(
        "SELECT slot FROM events WHERE emitter_id = ? AND channel = ? ORDER BY id_ms, id_seq",
        [emitterId, channel],
        (r) => r.slot as number,
      ),
    );
  }

  /** Forgets every window (events were deleted, or a transaction rolled back). */
  clear(): void {
    this.#windows.clear();
  }
}
