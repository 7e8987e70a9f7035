/**
 * Emitted events in per-channel windows, and each emitter's ID clock.
 *
 * A window is its channel's rows in ID order (index `events_order`, migration 011). Storing an event is
 * one INSERT, or, once a small window holds its size, one UPDATE of its oldest row; the background pruner
 * (domain/events/pruner.ts) deletes what is past its age, or beyond a size that shrank, in small
 * batches, and listing shows only the window's newest `keep` until it has. Each window's size is kept in memory
 * (window-counts.ts), as the only writer of the file, so neither needs a count of the rows. Clock writes
 * inside a transaction are held back and made once per emitter (deferred.ts); reads and deletes of these
 * tables make them first.
 */
import type { SQLInputValue } from "node:sqlite";
import type { EventQuery } from "../../domain/types.ts";
import type { EventOps } from "../concerns.ts";
import { rowsWithin } from "../event-search.ts";
import type { EventIdKey } from "../port.ts";
import { eventRowValues, toEvent } from "../rows.ts";
import type { DeferredWrites } from "./deferred.ts";
import { limitParam } from "./rows.ts";
import type { Sql } from "./sql.ts";
import type { WindowCounts } from "./window-counts.ts";

/** Writes an emitter's clock now (deferred.ts calls it, inside a transaction at COMMIT). */
export function writeClock(q: Sql, emitterId: string, ms: number, seq: number): void {
  q.run(
    `INSERT INTO emitter_clock (emitter_id, last_ms, last_seq) VALUES (?, ?, ?)
       ON CONFLICT (emitter_id) DO UPDATE SET last_ms = excluded.last_ms, last_seq = excluded.last_seq`,
    [emitterId, ms, seq],
  );
}

const newerOrSame = "(id_ms > ? OR (id_ms = ? AND id_seq >= ?))";

/**
 * The largest window whose oldest row a new event is written over. A small window's rows stay on a few
 * hot pages, and rewriting them costs fewer pages than an append and a delete (4.7 WAL frames per commit
 * of 19 events instead of 14.1, docs/architecture.md). In a window of 100,000 the oldest rows are on
 * cold pages, and the index entry moves from one end of the window to the other: retention 100,000
 * ingested at 61 % of retention 100 with every window rewritten in place, at 95 % with larger windows
 * appended and pruned in batches; retention 1,000 rewritten in place, 80 % (`--only history-retention`,
 * docs/architecture.md, "Event windows for retention").
 */
const rewriteUpTo = 100;

/**
 * The `n`-th newest (from 1) of the `stored` rows `where` holds, found from the nearer end of their key:
 * a window the pruner has not reached yet holds more than it keeps, and its edge is past the surplus
 * from the old end or past the kept from the new one, whichever is fewer (a window of 1,000,000 whose
 * retention just dropped to 100 took 40 ms from the old end, on the event loop).
 */
function nthNewest(
  q: Sql,
  where: string,
  params: SQLInputValue[],
  stored: number,
  n: number,
): EventIdKey | undefined {
  const fromNewest = n - 1 < stored - n;
  return q.get(
    `SELECT id_ms, id_seq FROM events WHERE ${where}
     ORDER BY ${fromNewest ? "id_ms DESC, id_seq DESC" : "id_ms, id_seq"} LIMIT 1 OFFSET ?`,
    [...params, fromNewest ? n - 1 : stored - n],
    (r) => ({ ms: r.id_ms as number, seq: r.id_seq as number }),
  );
}

/**
 * The condition and count of a listing: the channel's rows, from the window's oldest kept event on (its
 * `keep`-th newest, `nthNewest`, while the pruner has not reached it).
 */
function windowBounds(
  q: Sql,
  counts: WindowCounts,
  emitterId: string,
  query: EventQuery,
): { where: string; params: SQLInputValue[]; total: number } {
  const params: SQLInputValue[] = [emitterId, query.channel];
  let where = "emitter_id = ? AND channel = ?";
  const window = query.window;
  if (window?.sinceMs !== undefined) {
    where += " AND id_ms >= ?";
    params.push(window.sinceMs);
  }
  // With an age limit, the window's count less the events past it: those are few (the pruner deletes
  // them within seconds), where counting the events within it walked all of them (180 ms for a
  // million, at every listing of a source kept by days).
  const stored =
    counts.of(q, emitterId, query.channel) -
    (window?.sinceMs === undefined
      ? 0
      : q.count("SELECT count(*) AS n FROM events WHERE emitter_id = ? AND channel = ? AND id_ms < ?", [
          emitterId,
          query.channel,
          window.sinceMs,
        ]));
  if (!window || stored <= window.keep) return { where, params, total: stored };
  const oldest = nthNewest(q, where, params, stored, window.keep);
  // None: the pruner deleted the surplus since the count (another connection, on PostgreSQL).
  if (!oldest) return { where, params, total: Math.min(stored, window.keep) };
  return {
    where: `${where} AND ${newerOrSame}`,
    params: [...params, oldest.ms, oldest.ms, oldest.seq],
    total: window.keep,
  };
}

/**
 * The channels of the emitter `?1`, as the rows of `c(channel)` (and a last NULL): one index seek each
 * (a loose scan of events_order), not a walk over every event. Statements follow it with their SELECT.
 */
export const channelsOf = `WITH RECURSIVE c(channel) AS (
  SELECT min(channel) FROM events WHERE emitter_id = ?1
  UNION ALL
  SELECT (SELECT min(channel) FROM events WHERE emitter_id = ?1 AND channel > c.channel)
  FROM c WHERE c.channel IS NOT NULL)`;

export function eventOps(q: Sql, counts: WindowCounts, held: DeferredWrites): EventOps {
  return {
    getEmitterClock: async (emitterId) => {
      held.settle();
      return q.get("SELECT last_ms, last_seq FROM emitter_clock WHERE emitter_id = ?", [emitterId], (r) => ({
        ms: r.last_ms as number,
        seq: r.last_seq as number,
      }));
    },

    // Inside a transaction, the clock of one emitter is written once, with its last value.
    putEmitterClock: async (emitterId, ms, seq) => held.putClock(emitterId, ms, seq),

    // A small window at its size takes the new event in its oldest event's row, rewritten in place: the
    // pages that row and its index entry live on, instead of appended pages and, later, the pruner's
    // deletes (docs/architecture.md, "Event windows"). Larger windows append.
    insertEvent: async (e, reuseAt) => {
      const values = eventRowValues(e);
      if (
        reuseAt !== undefined &&
        reuseAt <= rewriteUpTo &&
        counts.of(q, e.emitterId, e.channel) >= reuseAt
      ) {
        const rows = counts.oldestFirst(q, e.emitterId, e.channel);
        const oldest = rows[0];
        if (oldest !== undefined) {
          q.run(
            "UPDATE events SET id = ?, id_ms = ?, id_seq = ?, indexed_at_ms = ?, event_json = ?, meta_json = ? WHERE rowid = ?",
            [...values, oldest],
          );
          // Changed only once the statement succeeded: the row now holds the newest event.
          rows.shift();
          rows.push(oldest);
          return;
        }
      }
      q.run(
        `INSERT INTO events (id, id_ms, id_seq, indexed_at_ms, event_json, meta_json, emitter_id, channel)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
        [...values, e.emitterId, e.channel],
      );
      counts.add(e.emitterId, e.channel, 1);
    },

    countEvents: async (emitterId, channel) => {
      held.settle();
      return counts.of(q, emitterId, channel);
    },

    // The window's `keep`+1-th newest, from its nearer end (`nthNewest`, as a listing finds its oldest
    // kept event); the cached count and the walk are one step under the store's lock.
    eventWindowCut: async (emitterId, channel, keep) => {
      held.settle();
      const stored = counts.of(q, emitterId, channel);
      if (stored <= keep) return undefined;
      return nthNewest(q, "emitter_id = ? AND channel = ?", [emitterId, channel], stored, keep + 1);
    },

    pruneEvents: async (emitterId, channel, limit, bounds = {}) => {
      held.settle();
      const params: SQLInputValue[] = [emitterId, channel];
      let where = "emitter_id = ? AND channel = ?";
      if (bounds.olderThanMs !== undefined) {
        where += " AND id_ms < ?";
        params.push(bounds.olderThanMs);
      }
      if (bounds.after) {
        where += " AND (id_ms > ? OR (id_ms = ? AND id_seq > ?))";
        params.push(bounds.after.ms, bounds.after.ms, bounds.after.seq);
      }
      if (bounds.upTo) {
        where += " AND (id_ms < ? OR (id_ms = ? AND id_seq <= ?))";
        params.push(bounds.upTo.ms, bounds.upTo.ms, bounds.upTo.seq);
      }
      const doomed = q.all(
        `SELECT rowid AS r, id_ms, id_seq FROM events WHERE ${where} ORDER BY id_ms, id_seq ${limitParam}`,
        [...params, limit],
        (r) => ({ rowid: r.r as number, ms: r.id_ms as number, seq: r.id_seq as number }),
      );
      const newest = doomed[doomed.length - 1];
      if (!newest) return { deleted: 0 };
      const deleted = q.run(`DELETE FROM events WHERE rowid IN (SELECT value FROM json_each(?))`, [
        JSON.stringify(doomed.map((d) => d.rowid)),
      ]);
      counts.add(emitterId, channel, -deleted);
      return { deleted, last: { ms: newest.ms, seq: newest.seq } };
    },

    // Two seeks, each on one column's bound: for `(emitter_id, channel) > (?, ?)`, or the same as an OR,
    // SQLite walked every row of `after`'s window (52 ms past a window of 1,000,000 on the 2-core
    // machine, on the event loop, where each pruner sweep stepped over it).
    nextEventWindow: async (after) => {
      held.settle();
      const key = (r: Record<string, unknown>) => ({
        emitterId: r.emitter_id as string,
        channel: r.channel as string,
      });
      if (!after)
        return q.get("SELECT emitter_id, channel FROM events ORDER BY emitter_id, channel LIMIT 1", [], key);
      return (
        q.get(
          "SELECT emitter_id, channel FROM events WHERE emitter_id = ? AND channel > ? ORDER BY channel LIMIT 1",
          [after.emitterId, after.channel],
          key,
        ) ??
        q.get(
          "SELECT emitter_id, channel FROM events WHERE emitter_id > ? ORDER BY emitter_id, channel LIMIT 1",
          [after.emitterId],
          key,
        )
      );
    },

    // One index seek per channel (a loose scan of events_order), not a walk over every event.
    listChannels: async (emitterId) => {
      held.settle();
      return q.all(
        `${channelsOf} SELECT channel FROM c WHERE channel IS NOT NULL`,
        [emitterId],
        (r) => r.channel as string,
      );
    },

    listEvents: async (emitterId, query) => {
      held.settle();
      const { where, params, total } = windowBounds(q, counts, emitterId, query);
      const [cursor, cursorParams, order] = query.before
        ? ["AND (id_ms > ? OR (id_ms = ? AND id_seq > ?))", query.before, "ASC"]
        : query.after
          ? ["AND (id_ms < ? OR (id_ms = ? AND id_seq < ?))", query.after, "DESC"]
          : ["", undefined, "DESC"];
      const body = `FROM events WHERE ${where} ${cursor} ORDER BY id_ms ${order}, id_seq ${order}`;
      const bodyParams = cursorParams
        ? [...params, cursorParams.ms, cursorParams.ms, cursorParams.seq]
        : params;
      // Sizes first (octet_length reads a row's header, not its text), then only the rows that fit: no
      // write comes between the two on this connection.
      const limit =
        query.maxBytes === undefined
          ? query.limit
          : rowsWithin(
              q.all(
                `SELECT octet_length(event_json) AS n ${body} ${limitParam}`,
                [...bodyParams, query.limit],
                (r) => Number(r.n),
              ),
              query.maxBytes,
            );
      const items = q.all(`SELECT * ${body} ${limitParam}`, [...bodyParams, limit], toEvent);
      return { items: query.before ? items.reverse() : items, totalCount: total };
    },

    deleteEvents: async (emitterId, from, to, channel) => {
      held.settle();
      const where = ["emitter_id = ?"];
      const params: SQLInputValue[] = [emitterId];
      if (channel !== undefined) {
        where.push("channel = ?");
        params.push(channel);
      }
      if (from) {
        where.push(newerOrSame);
        params.push(from.ms, from.ms, from.seq);
      }
      if (to) {
        where.push("(id_ms < ? OR (id_ms = ? AND id_seq <= ?))");
        params.push(to.ms, to.ms, to.seq);
      }
      counts.clear();
      return q.run(`DELETE FROM events WHERE ${where.join(" AND ")}`, params);
    },
  };
}
