/**
 * Replay: kept events sent again to a listener the caller chooses (docs/delivery.md, "Replay"). Each
 * event gets a new delivery, due now, written as routing writes deliveries but under the replay's own ID
 * in place of a subscription's (so a source listener gets a replay's events in order, one at a time),
 * and marked as a replay with the earlier delivery of the event to that listener it repeats, if one is
 * kept. The bulk form takes the source's kept events that the event search finds (docs/streams.md).
 */
import { chargeCopies } from "../domain/sources/stored-bytes.ts";
import type { Delivery, EventRecord, Subscription } from "../domain/types.ts";
import { newId } from "../ids.ts";
import { inPacedBatches } from "../pace.ts";
import type { EventKey, EventSearch } from "../storage/event-search.ts";
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
  /**
   * The free account whose daily stored bytes the copies count in (`storedBytesPayer`: the caller, when
   * free), added in the transaction that writes them.
   */
  payer?: string | undefined;
  /**
   * Called before each page of a bulk replay after its first, with the deliveries queued so far: throws
   * to stop it there (the payer's day of stored bytes ran out). Checked once before the first page only,
   * one request queued up to 10,000 events of 1 MiB past a quota it had a byte of.
   */
  beforePage?: (replayed: number) => Promise<void>;
}

/**
 * Deliveries a replay writes per transaction: 10,000 in one held SQLite's event loop for 0.4 to 1.3 s;
 * 500 take a few tens of milliseconds, and other work runs between them.
 */
const replayChunk = 500;

/**
 * Bytes of event JSON a bulk replay reads at once (a page of at most `replayChunk` events): events may
 * be up to 1 MiB each, and reading all 10,000 matches at once held up to 10 GiB.
 */
export const replayPageBytes = 4 * 1024 * 1024;

/** The subscription-like route a replay's deliveries go by, under its own `rpl_` ID. */
function replayRoute(r: Omit<ReplayRequest, "events">, emitterId: string): Subscription {
  return {
    id: newId("rpl"),
    ownerId: r.ownerId,
    emitterId,
    listenerId: r.listenerId,
    eventName: "",
    createdAt: Math.floor(r.nowMs / 1000),
  };
}

/** Writes one delivery per event by `route`, due now, marked as the replay, in one transaction. */
async function writeReplayed(
  store: Storage,
  route: Subscription,
  events: EventRecord[],
  nowMs: number,
  payer: string | undefined,
): Promise<Delivery[]> {
  const deliveries: Delivery[] = [];
  for (const event of events) {
    // One hop, as for an event from an endpoint: a replay starts a new path through the sources.
    const d = newDelivery(route, event, 1, nowMs);
    if (!d) continue;
    // Now, also for an event whose `delivery_ts` is still ahead: a replay is asked for now.
    d.nextAttemptMs = nowMs;
    deliveries.push(d);
  }
  if (deliveries.length === 0) return deliveries;
  await store.transaction(async (tx) => {
    await tx.insertDeliveries(deliveries);
    await tx.markReplay(route.id);
    await chargeCopies(tx, payer, deliveries, nowMs);
  });
  return deliveries;
}

/**
 * Writes one delivery per event to the listener, due now, marked as the replay, `replayChunk` a
 * transaction (a failure leaves the chunks before it queued); returns them.
 */
export async function replayEvents(
  store: Storage,
  r: ReplayRequest,
): Promise<{ replayId: string; deliveries: Delivery[] }> {
  const route = replayRoute(r, r.events[0]?.emitterId ?? "");
  const deliveries: Delivery[] = [];
  for (let at = 0; at < r.events.length; at += replayChunk) {
    if (at > 0) await new Promise<void>((resolve) => setImmediate(resolve));
    const chunk = r.events.slice(at, at + replayChunk);
    deliveries.push(...(await writeReplayed(store, route, chunk, r.nowMs, r.payer)));
  }
  return { replayId: route.id, deliveries };
}

/**
 * How many kept events a search finds (a bulk replay's: one source's channel, with its time range and
 * the event search's `q` and `where`), and the newest of them: what a replay of them sends at most.
 */
export async function countInRange(
  store: Storage,
  search: EventSearch,
): Promise<{ matching: number; newest: EventKey | undefined }> {
  const page = await store.searchEvents(search, { limit: 1, count: true });
  const e = page.items[0];
  return { matching: page.totalCount, newest: e && { ms: e.idMs, seq: e.idSeq, emitterId: e.emitterId } };
}

/**
 * Replays the events a search finds, up to and including `newest` (`countInRange`'s: events stored
 * since are not part of it), oldest first, a page at a time: each page (at most `replayPageBytes` of
 * events) is read, its deliveries written in one transaction, and dropped before the next is read.
 * Returns the replay's ID, the events it found and the deliveries it queued.
 */
export async function replayInRange(
  store: Storage,
  search: EventSearch,
  newest: EventKey,
  r: Omit<ReplayRequest, "events">,
): Promise<{ replayId: string; matching: number; replayed: number }> {
  const route = replayRoute(r, newest.emitterId);
  // Event IDs are positive, so this key is before every event; `after` is exclusive, so one past `newest`.
  let from: EventKey = { ms: -1, seq: 0, emitterId: "" };
  const through: EventKey = { ...newest, seq: newest.seq + 1 };
  let matching = 0;
  let replayed = 0;
  for (;;) {
    const page = await store.searchEvents(search, {
      limit: replayChunk,
      before: from,
      after: through,
      maxBytes: replayPageBytes,
    });
    // A page comes newest first.
    const events = page.items.reverse();
    const last = events[events.length - 1];
    if (!last) break;
    if (matching > 0) await r.beforePage?.(replayed);
    matching += events.length;
    replayed += (await writeReplayed(store, route, events, r.nowMs, r.payer)).length;
    from = { ms: last.idMs, seq: last.idSeq, emitterId: last.emitterId };
  }
  return { replayId: route.id, matching, replayed };
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
