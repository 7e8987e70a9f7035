/**
 * Reading what became of deliveries, and marking replays (docs/delivery.md, "Attempts" and "Replay"):
 * a listener's or an event's deliveries with filters, one stored event by ID, and the replay marks
 * (mirrors postgres/delivery-history.ts). Apart from deliveries.ts, whose statements are on the delivery
 * path: nothing here runs per delivery.
 */
import { parseEventId } from "../../domain/events/event-ids.ts";
import type { DeliveryHistoryOps } from "../concerns.ts";
import { toDelivery, toEvent } from "../rows.ts";
import { searchWhere } from "../search-where.ts";
import { orderedPending } from "./deliveries.ts";
import type { Sql } from "./sql.ts";

export function deliveryHistoryOps(q: Sql): DeliveryHistoryOps {
  return {
    searchDeliveries: async (search, page) => {
      const { where, params } = searchWhere(search, () => "?");
      return q.page("deliveries", where, params, page, toDelivery);
    },

    getEvent: async (emitterId, eventId) => {
      const id = parseEventId(eventId);
      if (!id) return undefined;
      return q.get(
        "SELECT * FROM events WHERE emitter_id = ? AND id_ms = ? AND id_seq = ? LIMIT 1",
        [emitterId, id.ms, id.seq],
        toEvent,
      );
    },

    // The deliveries just written are pending, under the replay's ID: the subscription index finds them.
    markReplay: async (replayId) =>
      q.run(
        `UPDATE deliveries AS d SET replay_id = d.subscription_id, replayed_from = (
           SELECT o.id FROM deliveries o
           WHERE o.emitter_id = d.emitter_id AND o.event_id = d.event_id AND o.listener_id = d.listener_id
             AND o.seq < d.seq
           ORDER BY o.seq DESC LIMIT 1)
         WHERE d.subscription_id = ? AND ${orderedPending("d")}`,
        [replayId],
      ),
  };
}
