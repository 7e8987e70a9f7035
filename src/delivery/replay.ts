/**
 * Replay: kept events sent again to a listener the caller chooses (docs/delivery.md, "Replay"). Each
 * event gets a new delivery, due now, written as routing writes deliveries but under the replay's own ID
 * in place of a subscription's (so a source listener gets a replay's events in order, one at a time),
 * and marked as a replay with the earlier delivery of the event to that listener it repeats, if one is
 * kept. The bulk form takes the source's kept events that the event search finds (docs/streams.md).
 */
import type { Delivery, EventRecord, Subscription } from "../domain/types.ts";
import { newId } from "../ids.ts";
import { inPacedBatches } from "../pace.ts";
import type { EventSearch } from "../storage/event-search.ts";
import type { Storage } from "../storage/port.ts";
import { newDelivery } from "./routing.ts";

/** Events one request may replay: beyond it, the caller narrows the range (a 400 says so). */
export const maxReplayedEvents = 10_000;

export interface ReplayRequest {
  /** Who the deliveries belong to (as a subscription's owner: the caller, or the organization it acts for). */
  ownerId: string;
  listenerId: string;
  /** Oldest first: the order their deliveries are queued in. */
  events: EventRecord[];
  nowMs: number;
}

/**
 * Deliveries a replay writes per transaction: 10,000 in one held SQLite's event loop for 0.4 to 1.3 s;
 * 500 take a few tens of milliseconds, and other work runs between them.
 */
const replayChunk = 500;

/**
 * Writes one delivery per event to the listener, due now, marked as the replay, `replayChunk` a
 * transaction (a failure leaves the chunks before it queued); returns them.
 */
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
  for (let at = 0; at < deliveries.length; at += replayChunk) {
    if (at > 0) await new Promise<void>((resolve) => setImmediate(resolve));
    const chunk = deliveries.slice(at, at + replayChunk);
    await store.transaction(async (tx) => {
      await tx.insertDeliveries(chunk);
      await tx.markReplay(replayId);
    });
  }
  return { replayId, deliveries };
}

/**
 * The kept events a search finds (a bulk replay's: one source's channel, with its time range and the
 * event search's `q` and `where`), oldest first, at most `limit` of them; `more` tells that others
 * matched beyond it.
 */
export async function eventsInRange(
  store: Storage,
  search: EventSearch,
  limit: number,
): Promise<{ events: EventRecord[]; more: boolean }> {
  // One past the limit tells whether more match; the newest `limit` would be sent, so none is.
  const page = await store.searchEvents(search, { limit: limit + 1 });
  return { events: page.items.slice(0, limit).reverse(), more: page.items.length > limit };
}

/** Failed deliveries a redeliver requeues per statement: about 6 ms of SQLite a batch (five indexes change per row). */
const requeueBatch = 250;

/**
 * Requeues a listener's failed deliveries created at or after `sinceMs` (`POST
 * /v1/webhooks/{id}/redeliver`), oldest first, `requeueBatch` a statement, pausing after each as long
 * as it took so that other work runs between them: one statement for a day's failures (300,000) held
 * SQLite's event loop for 3.1 s. Returns how many it requeued.
 */
export async function requeueFailed(
  store: Storage,
  listenerId: string,
  sinceMs: number,
  nowMs: number,
  batch = requeueBatch,
): Promise<number> {
  let afterSeq: number | undefined;
  return inPacedBatches(batch, async (limit) => {
    const r = await store.requeueFailedDeliveries(listenerId, sinceMs, nowMs, { afterSeq, limit });
    afterSeq = r.lastSeq;
    return r.requeued;
  });
}
