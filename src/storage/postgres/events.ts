/**
 * Emitted events in per-channel windows, and each emitter's ID clock.
 *
 * A window is the channel's rows in event-ID order (the primary key, migration 004). Storing events is
 * one statement per window and commit: for a window of up to 100 (the default) it also trims the window,
 * as before retention; larger windows append, the background pruner (domain/events/pruner.ts) deletes
 * their oldest in small batches, and listing shows only the window's newest `keep` until it has. The SQLite driver
 * keeps each window's size in memory, as the only writer of its file; here several processes may write
 * one window, so it is counted in SQL.
 */
import type { EventQuery, EventRecord } from "../../domain/types.ts";
import type { EventOps } from "../concerns.ts";
import { rowsWithin } from "../event-search.ts";
import { eventRowValues, toEvent } from "../rows.ts";
import { textsBySize } from "../texts-by-size.ts";
import type { Statement } from "./deferred.ts";
import type { Sql } from "./sql.ts";

/**
 * A small window (up to `trimUpTo`, the default 100) is still trimmed by the statement that stores its
 * events, as before retention: its cut is a backward scan of `keep`+1 entries of the primary key (below),
 * and the window is then exact at once for everything that reads the table, the event search included.
 * Larger windows append, and the pruner deletes their oldest in the background: their cut would scan up to
 * a million entries per commit.
 */
const trimUpTo = 100;

/** Appends each event's own columns (`eventRowValues`) to `params`. */
function pushEventValues(events: EventRecord[], params: unknown[]): void {
  for (const e of events) params.push(...eventRowValues(e));
}

/**
 * `n` VALUES rows for an INSERT whose `$1` and `$2` are the window's emitter and channel, each event's
 * own six columns numbered after the statement's first `before` parameters, then `tail` (more columns).
 */
function valueRows(n: number, before: number, tail = ""): string {
  const rows: string[] = [];
  for (let r = 0; r < n; r++) {
    const last = before + (r + 1) * 6;
    rows.push(
      `($1, $2, $${last - 5}, $${last - 4}, $${last - 3}, $${last - 2}, $${last - 1}, $${last}${tail})`,
    );
  }
  return rows.join(", ");
}

/**
 * Stores events of one window and deletes the window's rows from the `keep`-th newest down, in one
 * statement. A data-modifying CTE's rows are invisible to the rest of its statement, so the cut is
 * taken over the rows there were plus the new ones, and only the newest `keep` of the new ones are
 * inserted (older ones would be cut at once, and the DELETE could not see them).
 *
 * The cut is the `keep`+1-th newest of the window's newest `keep`+1 rows and the new ones: a backward
 * scan of the primary key that stops after `keep`+1 entries, never reaching the old end of the window
 * where the rows deleted by earlier commits wait for vacuum. It is a scalar subquery, computed once, so
 * the DELETE reads only the key range it deletes (docs/architecture.md, "A window's trim by key range").
 */
function insertAndTrim(events: EventRecord[], keep: number): Statement {
  const first = events[0]!;
  const newest = [...events]
    .sort((a, b) => b.idMs - a.idMs || b.idSeq - a.idSeq)
    .slice(0, keep)
    .reverse();
  const params: unknown[] = [first.emitterId, first.channel, keep];
  if (newest.length === 0) {
    // A window of 0: nothing is stored, and every row goes.
    return {
      text: "DELETE FROM events WHERE emitter_id = $1 AND channel = $2 AND $3::int IS NOT NULL",
      params,
    };
  }
  // Each event's values once (its JSON is stringified here): as rows for the text, as one array per
  // column for the prepared form that a transaction sends.
  const columns: unknown[][] = [[], [], [], [], [], []];
  for (const e of newest) {
    const values = eventRowValues(e);
    params.push(...values);
    for (let i = 0; i < values.length; i++) columns[i]!.push(values[i]);
  }
  return {
    text: trimText(newest.length),
    params,
    prepared: {
      text: "EXECUTE fount_window_insert($1, $2, $3, $4, $5, $6, $7, $8, $9)",
      params: [first.emitterId, first.channel, keep, ...columns],
    },
  };
}

/**
 * Stores a window's events (`rows`: a VALUES list or a SELECT of them, with `$1` and `$2` the emitter and
 * channel) and deletes those past its newest `$3`, in one statement.
 */
function windowInsert(rows: string): string {
  return `
WITH added AS (
  INSERT INTO events (emitter_id, channel, id, id_ms, id_seq, indexed_at_ms, event_json, meta_json, searchable)
  ${rows}
  RETURNING id_ms, id_seq
)
DELETE FROM events
WHERE emitter_id = $1 AND channel = $2 AND (id_ms, id_seq) <= (
  SELECT id_ms, id_seq FROM (
    (SELECT id_ms, id_seq FROM events WHERE emitter_id = $1 AND channel = $2
     ORDER BY id_ms DESC, id_seq DESC LIMIT $3::int + 1)
    UNION ALL SELECT id_ms, id_seq FROM added
  ) w ORDER BY id_ms DESC, id_seq DESC OFFSET $3 LIMIT 1)`;
}

/**
 * `insertAndTrim`'s statement, prepared once on each connection a transaction takes (driver.ts): parsing,
 * analysing and planning the text of a commit's 50 rows took about a quarter of PostgreSQL's remaining
 * CPU per stored event (docs/architecture.md, "PostgreSQL's own CPU per hit"). The rows come as one array
 * per column; the statement is `trimText`'s (`windowInsert`).
 */
export const prepareWindowInsert = `PREPARE fount_window_insert(text, text, int, text[], bigint[], bigint[], bigint[], text[], text[]) AS
${windowInsert("SELECT $1, $2, u.*, false FROM unnest($4, $5, $6, $7, $8, $9) u")}`;

/**
 * The text of `insertAndTrim` for `n` events stored. Their rows are not `searchable` yet: the search
 * indexer puts the ones the window still holds a moment later into the search's GIN indexes (migration
 * 016), so the many a busy window drops at once never cost an index entry; the search reads them
 * meanwhile through `events_unsearched` (event-search.ts).
 */
const trimText = textsBySize((n) => windowInsert(`VALUES ${valueRows(n, 3, ", false")}`));

/** Stores the events of one window held back in a transaction, in one multi-row INSERT. */
function insertAll(events: EventRecord[]): { text: string; params: unknown[] } {
  const first = events[0]!;
  const params: unknown[] = [first.emitterId, first.channel];
  pushEventValues(events, params);
  return { text: appendText(events.length), params };
}

/** The text of `insertAll` for `n` events. */
const appendText = textsBySize(
  (n) => `INSERT INTO events (emitter_id, channel, id, id_ms, id_seq, indexed_at_ms, event_json, meta_json)
           VALUES ${valueRows(n, 2)}`,
);

/**
 * The condition and count of a listing: the channel's rows, from the window's oldest kept event on. A
 * window the pruner has not reached yet holds more than `keep`: its oldest kept event is found from the
 * old end of the primary key, past the surplus only.
 */
async function windowBounds(
  q: Sql,
  emitterId: string,
  query: EventQuery,
): Promise<{ where: string; params: unknown[]; total: number }> {
  const params: unknown[] = [emitterId, query.channel];
  let where = "emitter_id = $1 AND channel = $2";
  const window = query.window;
  if (window?.sinceMs !== undefined) {
    params.push(window.sinceMs);
    where += ` AND id_ms >= $${params.length}`;
  }
  if (!window) {
    const stored =
      (await q.get(`SELECT count(*)::int AS n FROM events WHERE ${where}`, params, (r) => r.n as number)) ??
      0;
    return { where, params, total: stored };
  }
  // The count and the bound in one statement, so one snapshot: the pruner deletes beside it.
  const k = params.length + 1;
  const found = await q.get(
    `WITH c AS (SELECT count(*)::int AS n FROM events WHERE ${where})
     SELECT c.n, b.id_ms, b.id_seq FROM c LEFT JOIN LATERAL (
       SELECT id_ms, id_seq FROM events WHERE ${where}
       ORDER BY id_ms, id_seq OFFSET GREATEST(c.n - $${k}, 0) LIMIT 1) b ON c.n > $${k}`,
    [...params, window.keep],
    (r) => ({
      stored: r.n as number,
      oldest: r.id_ms === null ? undefined : { ms: Number(r.id_ms), seq: Number(r.id_seq) },
    }),
  );
  const stored = found?.stored ?? 0;
  const oldest = found?.oldest;
  if (!oldest) return { where, params, total: Math.min(stored, window.keep) };
  params.push(oldest.ms, oldest.seq);
  return {
    where: `${where} AND (id_ms, id_seq) >= ($${params.length - 1}, $${params.length})`,
    params,
    total: window.keep,
  };
}

/**
 * The channels of the emitter `$1`, as the rows of `c(channel)` (and a last NULL): one index seek each
 * (a loose scan of the primary key), not a walk over every event. Statements follow it with their SELECT.
 */
export const channelsOf = `WITH RECURSIVE c(channel) AS (
  SELECT min(channel) FROM events WHERE emitter_id = $1
  UNION ALL
  SELECT (SELECT min(channel) FROM events WHERE emitter_id = $1 AND channel > c.channel)
  FROM c WHERE c.channel IS NOT NULL)`;

export function eventOps(q: Sql): EventOps {
  return {
    getEmitterClock: (emitterId, lock) =>
      q.get(
        `SELECT last_ms, last_seq FROM emitter_clock WHERE emitter_id = $1${lock ? " FOR UPDATE" : ""}`,
        [emitterId],
        (r) => ({ ms: r.last_ms as number, seq: r.last_seq as number }),
      ),

    // Inside a transaction, the clock of one emitter is written once, with its last value.
    putEmitterClock: (emitterId, ms, seq) =>
      q.deferMerged(`clock\0${emitterId}`, { ms, seq }, (clocks) => {
        const last = clocks[clocks.length - 1]!;
        return {
          text: `INSERT INTO emitter_clock (emitter_id, last_ms, last_seq) VALUES ($1, $2, $3)
                 ON CONFLICT (emitter_id) DO UPDATE SET last_ms = excluded.last_ms, last_seq = excluded.last_seq`,
          params: [emitterId, last.ms, last.seq],
        };
      }),

    // Inside a transaction, the events of one window are stored by one statement.
    insertEvent: (e, reuseAt) =>
      q.deferMerged(`events\0${e.emitterId}\0${e.channel}`, { e, reuseAt }, (items) => {
        const keep = items[items.length - 1]!.reuseAt;
        const events = items.map((i) => i.e);
        return keep !== undefined && keep <= trimUpTo ? insertAndTrim(events, keep) : insertAll(events);
      }),

    countEvents: async (emitterId, channel) =>
      (await q.get(
        "SELECT count(*)::int AS n FROM events WHERE emitter_id = $1 AND channel = $2",
        [emitterId, channel],
        (r) => r.n as number,
      )) ?? 0,

    // From the newest end, whatever the window's size: the old end holds the rows pruned before, which
    // stay in the index until vacuum. As long a walk as the count the pruner took before, and no count.
    eventWindowCut: (emitterId, channel, keep) =>
      q.get(
        `SELECT id_ms, id_seq FROM events WHERE emitter_id = $1 AND channel = $2
         ORDER BY id_ms DESC, id_seq DESC OFFSET $3 LIMIT 1`,
        [emitterId, channel, keep],
        (r) => ({ ms: Number(r.id_ms), seq: Number(r.id_seq) }),
      ),

    // The oldest `limit` by a forward scan of the primary key from `after` on, deleted by key.
    pruneEvents: async (emitterId, channel, limit, bounds = {}) => {
      const params: unknown[] = [emitterId, channel, limit];
      let where = "emitter_id = $1 AND channel = $2";
      if (bounds.olderThanMs !== undefined) {
        params.push(bounds.olderThanMs);
        where += ` AND id_ms < $${params.length}`;
      }
      if (bounds.after) {
        params.push(bounds.after.ms, bounds.after.seq);
        where += ` AND (id_ms, id_seq) > ($${params.length - 1}, $${params.length})`;
      }
      if (bounds.upTo) {
        params.push(bounds.upTo.ms, bounds.upTo.seq);
        where += ` AND (id_ms, id_seq) <= ($${params.length - 1}, $${params.length})`;
      }
      const gone = await q.all(
        `WITH doomed AS (SELECT id_ms, id_seq FROM events WHERE ${where} ORDER BY id_ms, id_seq LIMIT $3)
         DELETE FROM events e USING doomed d
         WHERE e.emitter_id = $1 AND e.channel = $2 AND e.id_ms = d.id_ms AND e.id_seq = d.id_seq
         RETURNING e.id_ms, e.id_seq`,
        params,
        (r) => ({ ms: Number(r.id_ms), seq: Number(r.id_seq) }),
      );
      let last: { ms: number; seq: number } | undefined;
      for (const k of gone) if (!last || k.ms > last.ms || (k.ms === last.ms && k.seq > last.seq)) last = k;
      return last ? { deleted: gone.length, last } : { deleted: 0 };
    },

    nextEventWindow: (after) =>
      q.get(
        after
          ? `SELECT emitter_id, channel FROM events WHERE (emitter_id, channel) > ($1, $2)
             ORDER BY emitter_id, channel LIMIT 1`
          : "SELECT emitter_id, channel FROM events ORDER BY emitter_id, channel LIMIT 1",
        after ? [after.emitterId, after.channel] : [],
        (r) => ({ emitterId: r.emitter_id as string, channel: r.channel as string }),
      ),

    // One index seek per channel (a loose scan of the primary key), not a walk over every event.
    listChannels: (emitterId) =>
      q.all(
        // COLLATE "C": the byte order SQLite sorts by, whatever the database's collation.
        `${channelsOf} SELECT channel COLLATE "C" AS channel FROM c WHERE channel IS NOT NULL ORDER BY 1`,
        [emitterId],
        (r) => r.channel as string,
      ),

    listEvents: async (emitterId, query) => {
      const { where: base, params, total: totalCount } = await windowBounds(q, emitterId, query);
      const cursor = query.before ?? query.after;
      const order = query.before ? "ASC" : "DESC";
      const where = cursor
        ? `${base} AND (id_ms, id_seq) ${query.before ? ">" : "<"} ($${params.length + 1}, $${params.length + 2})`
        : base;
      const all = cursor ? [...params, cursor.ms, cursor.seq] : [...params];
      const orderBy = `ORDER BY id_ms ${order}, id_seq ${order}`;
      let limit = query.limit;
      let bound = "";
      if (query.maxBytes !== undefined) {
        // Sizes first (octet_length of a TOASTed text reads its header, not its value), then the rows
        // that fit, up to the last of them: another statement, so rows stored meanwhile stay out.
        const sized = await q.all(
          `SELECT id_ms, id_seq, octet_length(event_json) AS n FROM events WHERE ${where} ${orderBy} LIMIT $${all.length + 1}`,
          [...all, query.limit],
          (r) => ({ ms: Number(r.id_ms), seq: Number(r.id_seq), n: Number(r.n) }),
        );
        limit = rowsWithin(
          sized.map((r) => r.n),
          query.maxBytes,
        );
        const last = sized[limit - 1];
        if (last) {
          all.push(last.ms, last.seq);
          bound = ` AND (id_ms, id_seq) ${query.before ? "<=" : ">="} ($${all.length - 1}, $${all.length})`;
        }
      }
      const items = await q.all(
        `SELECT * FROM events WHERE ${where}${bound} ${orderBy} LIMIT $${all.length + 1}`,
        [...all, limit],
        toEvent,
      );
      return { items: query.before ? items.reverse() : items, totalCount };
    },

    deleteEvents: (emitterId, from, to, channel) => {
      const where = ["emitter_id = $1"];
      const params: unknown[] = [emitterId];
      if (channel !== undefined) {
        params.push(channel);
        where.push(`channel = $${params.length}`);
      }
      if (from) {
        params.push(from.ms, from.seq);
        where.push(`(id_ms, id_seq) >= ($${params.length - 1}, $${params.length})`);
      }
      if (to) {
        params.push(to.ms, to.seq);
        where.push(`(id_ms, id_seq) <= ($${params.length - 1}, $${params.length})`);
      }
      return q.run(`DELETE FROM events WHERE ${where.join(" AND ")}`, params);
    },
  };
}
