/**
 * Emitted events in per-channel windows of the newest `keep`, and each emitter's ID clock.
 *
 * A window is a set of numbered slots (migration 004) whose numbers this connection keeps in memory
 * (window-slots.ts), as the only writer of its file: while a window fills, a new event takes a free
 * slot; once it is full, the new event overwrites the oldest one's row. Storing an event is then one
 * INSERT or one UPDATE, never a read or a trim. Clock writes inside a transaction are held back and made
 * once per emitter (deferred.ts); reads and deletes of these tables make them first.
 */
import type { SQLInputValue } from "node:sqlite";
import type { EventRecord } from "../../domain/types.ts";
import type { EventOps } from "../concerns.ts";
import { toEvent } from "../rows.ts";
import type { DeferredWrites } from "./deferred.ts";
import { limitParam } from "./rows.ts";
import type { Sql } from "./sql.ts";
import type { WindowSlots } from "./window-slots.ts";

/** Writes an emitter's clock now (deferred.ts calls it, inside a transaction at COMMIT). */
export function writeClock(q: Sql, emitterId: string, ms: number, seq: number): void {
  q.run(
    `INSERT INTO emitter_clock (emitter_id, last_ms, last_seq) VALUES (?, ?, ?)
       ON CONFLICT (emitter_id) DO UPDATE SET last_ms = excluded.last_ms, last_seq = excluded.last_seq`,
    [emitterId, ms, seq],
  );
}

export function eventOps(q: Sql, slots: WindowSlots, held: DeferredWrites): EventOps {
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

    insertEvent: async (e, keep) => {
      const order = slots.of(q, e.emitterId, e.channel);
      // The cached window changes only after each statement succeeded, so a failed one leaves it true.
      // A window holding more than `keep` (a smaller `keep` than before) loses its oldest first.
      while (order.length > keep) {
        q.run("DELETE FROM events WHERE emitter_id = ? AND channel = ? AND slot = ?", [
          e.emitterId,
          e.channel,
          order[0]!,
        ]);
        order.shift();
      }
      const values = [
        e.id,
        e.idMs,
        e.idSeq,
        e.indexedAtMs,
        JSON.stringify(e.event ?? null),
        JSON.stringify(e.meta),
        e.emitterId,
        e.channel,
      ];
      if (order.length === keep) {
        // Full: the new event takes the oldest one's row.
        const oldest = order[0]!;
        q.run(
          `UPDATE events SET id = ?, id_ms = ?, id_seq = ?, indexed_at_ms = ?, event_json = ?, meta_json = ?
         WHERE emitter_id = ? AND channel = ? AND slot = ?`,
          [...values, oldest],
        );
        order.shift();
        order.push(oldest);
        return;
      }
      // Filling: the lowest slot number no event holds (a deleted event's, or the next one up).
      const used = new Set(order);
      let slot = 0;
      while (used.has(slot)) slot++;
      q.run(
        `INSERT INTO events (id, id_ms, id_seq, indexed_at_ms, event_json, meta_json, emitter_id, channel, slot)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
        [...values, slot],
      );
      order.push(slot);
    },

    listChannels: async (emitterId) => {
      held.settle();
      return q.all(
        "SELECT DISTINCT channel FROM events WHERE emitter_id = ? ORDER BY channel",
        [emitterId],
        (r) => r.channel as string,
      );
    },

    listEvents: async (emitterId, query) => {
      held.settle();
      const base = "emitter_id = ? AND channel = ?";
      const params: SQLInputValue[] = [emitterId, query.channel];
      const total = q.count(`SELECT count(*) AS n FROM events WHERE ${base}`, params);
      let items: EventRecord[];
      if (query.before) {
        items = q
          .all(
            `SELECT * FROM events WHERE ${base} AND (id_ms > ? OR (id_ms = ? AND id_seq > ?)) ORDER BY id_ms ASC, id_seq ASC ${limitParam}`,
            [...params, query.before.ms, query.before.ms, query.before.seq, query.limit],
            toEvent,
          )
          .reverse();
      } else if (query.after) {
        items = q.all(
          `SELECT * FROM events WHERE ${base} AND (id_ms < ? OR (id_ms = ? AND id_seq < ?)) ORDER BY id_ms DESC, id_seq DESC ${limitParam}`,
          [...params, query.after.ms, query.after.ms, query.after.seq, query.limit],
          toEvent,
        );
      } else {
        items = q.all(
          `SELECT * FROM events WHERE ${base} ORDER BY id_ms DESC, id_seq DESC ${limitParam}`,
          [...params, query.limit],
          toEvent,
        );
      }
      return { items, totalCount: total };
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
        where.push("(id_ms > ? OR (id_ms = ? AND id_seq >= ?))");
        params.push(from.ms, from.ms, from.seq);
      }
      if (to) {
        where.push("(id_ms < ? OR (id_ms = ? AND id_seq <= ?))");
        params.push(to.ms, to.ms, to.seq);
      }
      slots.clear();
      return q.run(`DELETE FROM events WHERE ${where.join(" AND ")}`, params);
    },
  };
}
