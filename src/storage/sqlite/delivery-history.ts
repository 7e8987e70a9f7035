/**
 * Reading what became of deliveries, and marking replays (docs/delivery.md, "Attempts" and "Replay"):
 * a listener's or an event's deliveries with filters, one stored event by ID, and the replay marks
 * (mirrors postgres/delivery-history.ts). Apart from deliveries.ts, whose statements are on the delivery
 * path: nothing here runs per delivery.
 */
import { parseEventId } from "../../domain/events/event-ids.ts";
import type { Delivery, Page, PageQuery, WithSeq } from "../../domain/types.ts";
import type { DeliveryHistoryOps } from "../concerns.ts";
import type { DeliverySearch } from "../port.ts";
import { toDelivery, toEvent } from "../rows.ts";
import { searchWhere } from "../search-where.ts";
import { orderedPending } from "./deliveries.ts";
import { channelsOf } from "./events.ts";
import type { Sql } from "./sql.ts";

/**
 * A page of the deliveries `search` matches, and how many match in all. The store's own
 * `searchDeliveries` runs it on a search thread (search-threads.ts): counting a busy webhook's seven
 * days of deliveries walks millions of index entries.
 */
export function findDeliveries(q: Sql, search: DeliverySearch, page: PageQuery): Page<WithSeq<Delivery>> {
  const { where, params } = searchWhere(search, () => "?");
  return q.page("deliveries", where, params, page, toDelivery);
}

export function deliveryHistoryOps(q: Sql): DeliveryHistoryOps {
  return {
    searchDeliveries: async (search, page) => findDeliveries(q, search, page),

    getEvent: async (emitterId, eventId) => {
      const id = parseEventId(eventId);
      if (!id) return undefined;
      // One seek per channel of the emitter (`channelsOf`), then one for the event in each (CROSS JOIN
      // keeps that order): told only the emitter, the index's walk read every event of the channels
      // before the one holding it, 130 to 186 ms for a source keeping 1,000,000.
      return q.get(
        `${channelsOf} SELECT e.* FROM c CROSS JOIN events e
         WHERE e.emitter_id = ?1 AND e.channel = c.channel AND e.id_ms = ?2 AND e.id_seq = ?3 LIMIT 1`,
        [emitterId, id.ms, id.seq],
        toEvent,
      );
    },

    // The deliveries just written are pending, under the replay's ID: the subscription index finds them.
    // Each one's earlier delivery is looked up by its event (a handful of rows): left to itself, SQLite
    // walked the listener's index back from each, every delivery the listener has had in seven days
    // (a replay of 2,000 events to a fresh webhook took 1.9 s, of 10,000 51 s, all on the event loop).
    markReplay: async (replayId) =>
      q.run(
        `UPDATE deliveries AS d SET replay_id = d.subscription_id, replayed_from = (
           SELECT o.id FROM deliveries o INDEXED BY deliveries_event
           WHERE o.emitter_id = d.emitter_id AND o.event_id = d.event_id AND o.listener_id = d.listener_id
             AND o.seq < d.seq
           ORDER BY o.seq DESC LIMIT 1)
         WHERE d.subscription_id = ? AND ${orderedPending("d")} AND d.replay_id IS NULL`,
        [replayId],
      ),
  };
}
