/**
 * Emitted events in per-channel windows of the newest `keep`, and each emitter's ID clock.
 *
 * The SQLite driver keeps each window's slots in its memory, as the only writer of its file. Here
 * several processes may write one window, so nothing about a window lives in memory: a window is the
 * channel's rows in event-ID order, and the statement that stores an event also deletes what falls
 * beyond the newest `keep`.
 */
import type { EventRecord } from "../../domain/types.ts";
import type { EventOps } from "../concerns.ts";
import { toEvent } from "../rows.ts";
import type { Sql } from "./sql.ts";

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
function insertAndTrim(events: EventRecord[], keep: number): { text: string; params: unknown[] } {
  const first = events[0]!;
  const newest = [...events]
    .sort((a, b) => b.idMs - a.idMs || b.idSeq - a.idSeq)
    .slice(0, keep)
    .reverse();
  const params: unknown[] = [first.emitterId, first.channel, keep];
  const rows = newest.map((e) => {
    params.push(
      e.id,
      e.idMs,
      e.idSeq,
      e.indexedAtMs,
      JSON.stringify(e.event ?? null),
      JSON.stringify(e.meta),
    );
    const n = params.length;
    return `($1, $2, $${n - 5}, $${n - 4}, $${n - 3}, $${n - 2}, $${n - 1}, $${n})`;
  });
  if (rows.length === 0) {
    // A window of 0: nothing is stored, and every row goes.
    return {
      text: "DELETE FROM events WHERE emitter_id = $1 AND channel = $2 AND $3::int IS NOT NULL",
      params,
    };
  }
  return {
    text: `
WITH added AS (
  INSERT INTO events (emitter_id, channel, id, id_ms, id_seq, indexed_at_ms, event_json, meta_json)
  VALUES ${rows.join(", ")}
  RETURNING id_ms, id_seq
)
DELETE FROM events
WHERE emitter_id = $1 AND channel = $2 AND (id_ms, id_seq) <= (
  SELECT id_ms, id_seq FROM (
    (SELECT id_ms, id_seq FROM events WHERE emitter_id = $1 AND channel = $2
     ORDER BY id_ms DESC, id_seq DESC LIMIT $3::int + 1)
    UNION ALL SELECT id_ms, id_seq FROM added
  ) w ORDER BY id_ms DESC, id_seq DESC OFFSET $3 LIMIT 1)`,
    params,
  };
}

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
    insertEvent: (e, keep) =>
      q.deferMerged(`events\0${e.emitterId}\0${e.channel}`, { e, keep }, (items) =>
        insertAndTrim(
          items.map((i) => i.e),
          items[items.length - 1]!.keep,
        ),
      ),

    listChannels: (emitterId) =>
      q.all(
        // COLLATE "C": the byte order SQLite sorts by, whatever the database's collation.
        `SELECT DISTINCT channel COLLATE "C" AS channel FROM events WHERE emitter_id = $1 ORDER BY 1`,
        [emitterId],
        (r) => r.channel as string,
      ),

    listEvents: async (emitterId, query) => {
      const base = "emitter_id = $1 AND channel = $2";
      const params: unknown[] = [emitterId, query.channel];
      const totalCount =
        (await q.get(`SELECT count(*) AS n FROM events WHERE ${base}`, params, (r) => r.n as number)) ?? 0;
      let items: EventRecord[];
      if (query.before) {
        items = (
          await q.all(
            `SELECT * FROM events WHERE ${base} AND (id_ms, id_seq) > ($3, $4)
             ORDER BY id_ms ASC, id_seq ASC LIMIT $5`,
            [...params, query.before.ms, query.before.seq, query.limit],
            toEvent,
          )
        ).reverse();
      } else if (query.after) {
        items = await q.all(
          `SELECT * FROM events WHERE ${base} AND (id_ms, id_seq) < ($3, $4)
           ORDER BY id_ms DESC, id_seq DESC LIMIT $5`,
          [...params, query.after.ms, query.after.seq, query.limit],
          toEvent,
        );
      } else {
        items = await q.all(
          `SELECT * FROM events WHERE ${base} ORDER BY id_ms DESC, id_seq DESC LIMIT $3`,
          [...params, query.limit],
          toEvent,
        );
      }
      return { items, totalCount };
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
