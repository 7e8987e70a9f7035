/**
 * Reading what became of deliveries, and marking replays (docs/delivery.md, "Attempts" and "Replay"):
 * a listener's or an event's deliveries with filters, one stored event by ID, and the replay marks
 * (mirrors sqlite/delivery-history.ts). Apart from deliveries.ts, whose statements are on the delivery
 * path: nothing here runs per delivery.
 */
import { parseEventId } from "../../domain/events/event-ids.ts";
import type { DeliveryHistoryOps } from "../concerns.ts";
import { toDelivery, toEvent } from "../rows.ts";
import { searchWhere } from "../search-where.ts";
import { orderedPending } from "./deliveries.ts";
import { channelsOf } from "./events.ts";
import type { Sql } from "./sql.ts";

export function deliveryHistoryOps(q: Sql): DeliveryHistoryOps {
  return {
    // A listener's deliveries page in the order of its indexes (the listener's, or its failed ones'):
    // ordered by seq alone, the planner walked the primary key backwards from the newest delivery of
    // any listener, past 700,000 to reach a webhook's failed ones of days before (128 ms, once analyzed).
    searchDeliveries: (search, page) => {
      const byListener = search.listenerId !== undefined && search.event === undefined;
      const { where, params } = searchWhere(search, (n) => `$${n}`, byListener);
      return q.page("deliveries", where, params, page, toDelivery, byListener ? "listener_id" : undefined);
    },

    getEvent: async (emitterId, eventId) => {
      const id = parseEventId(eventId);
      if (!id) return undefined;
      // One seek per channel of the emitter (`channelsOf`), then one for the event in each, as on
      // SQLite: told only the emitter, the key's walk reads every event of the channels before the one
      // holding it.
      return q.get(
        `${channelsOf} SELECT e.* FROM c JOIN events e
         ON e.emitter_id = $1 AND e.channel = c.channel AND e.id_ms = $2 AND e.id_seq = $3 LIMIT 1`,
        [emitterId, id.ms, id.seq],
        toEvent,
      );
    },

    // The deliveries just written are pending, under the replay's ID: the subscription index finds them.
    markReplay: (replayId) =>
      q.run(
        `UPDATE deliveries d SET replay_id = d.subscription_id, replayed_from = (
           SELECT o.id FROM deliveries o
           WHERE o.emitter_id = d.emitter_id AND o.event_id = d.event_id AND o.listener_id = d.listener_id
             AND o.seq < d.seq
           ORDER BY o.seq DESC LIMIT 1)
         WHERE d.subscription_id = $1 AND ${orderedPending("d")} AND d.replay_id IS NULL`,
        [replayId],
      ),
  };
}
