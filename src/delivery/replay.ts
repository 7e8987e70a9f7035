/**
 * Replay: kept events sent again to a listener the caller chooses (docs/delivery.md, "Replay"). Each
 * event gets a new delivery, due now, written as routing writes deliveries but under the replay's own ID
 * in place of a subscription's (so a source listener gets a replay's events in order, one at a time),
 * and marked as a replay with the earlier delivery of the event to that listener it repeats, if one is
 * kept. The bulk form walks the source's kept events with the filters of the request.
 */
import type { Delivery, EventRecord, Subscription } from "../domain/types.ts";
import { newId } from "../ids.ts";
import type { Storage } from "../storage/port.ts";
import { newDelivery } from "./routing.ts";

/** Events one request may replay: beyond it, the caller narrows the range (a 400 says so). */
export const maxReplayedEvents = 10_000;

/** Events read per page while looking for the ones to replay. */
const scanPage = 100;

export interface ReplayRequest {
  /** Who the deliveries belong to (as a subscription's owner: the caller, or the organization it acts for). */
  ownerId: string;
  listenerId: string;
  /** Oldest first: the order their deliveries are queued in. */
  events: EventRecord[];
  nowMs: number;
}

/** Writes one delivery per event to the listener, due now, marked as the replay; returns them. */
export async function replayEvents(
  store: Storage,
  r: ReplayRequest,
): Promise<{ replayId: string; deliveries: Delivery[] }> {
  const replayId = newId("rpl");
  const route: Subscription = {
    id: replayId,
    ownerId: r.ownerId,
    emitterId: r.events[0]?.emitterId ?? "",
    listenerId: r.listenerId,
    eventName: "",
    createdAt: Math.floor(r.nowMs / 1000),
  };
  const deliveries: Delivery[] = [];
  for (const event of r.events) {
    // One hop, as for an event from an endpoint: a replay starts a new path through the sources.
    const d = newDelivery(route, event, 1, r.nowMs);
    if (!d) continue;
    // Now, also for an event whose `delivery_ts` is still ahead: a replay is asked for now.
    d.nextAttemptMs = r.nowMs;
    deliveries.push(d);
  }
  if (deliveries.length > 0)
    await store.transaction(async (tx) => {
      await tx.insertDeliveries(deliveries);
      await tx.markReplay(replayId);
    });
  return { replayId, deliveries };
}

/** Which of a source's kept events a bulk replay takes. */
export interface EventRange {
  channel: string;
  /** At or after this time (epoch ms), by the event's ID, which is its time and only grows. */
  sinceMs?: number;
  /** Before this time (epoch ms), by the event's ID. */
  untilMs?: number;
  /**
   * Further conditions on an event (the search's `q` and `where`), when given: the one place where the
   * event search plugs into replay.
   */
  matches?: (e: EventRecord) => boolean;
}

/**
 * The kept events of `emitterId` in `range`, oldest first, at most `limit` of them; `more` tells that
 * others matched beyond it. Pages back from the newest, and stops at the first event older than `sinceMs`.
 */
export async function eventsInRange(
  store: Storage,
  emitterId: string,
  range: EventRange,
  limit: number,
): Promise<{ events: EventRecord[]; more: boolean }> {
  const found: EventRecord[] = [];
  let after: { ms: number; seq: number } | undefined;
  for (;;) {
    const page = await store.listEvents(emitterId, { channel: range.channel, limit: scanPage, after });
    for (const e of page.items) {
      if (range.sinceMs !== undefined && e.idMs < range.sinceMs)
        return { events: found.reverse(), more: false };
      if (range.untilMs !== undefined && e.idMs >= range.untilMs) continue;
      if (range.matches && !range.matches(e)) continue;
      if (found.length === limit) return { events: found.reverse(), more: true };
      found.push(e);
    }
    const last = page.items.at(-1);
    if (!last || page.items.length < scanPage) return { events: found.reverse(), more: false };
    after = { ms: last.idMs, seq: last.idSeq };
  }
}
