/**
 * Routing: when an event is stored, one delivery per matching subscription is written in the same
 * transaction (the outbox), so a crash between the commit and the delivery loses nothing. Matching: the
 * subscription's channel, and its emitter — the exact ID, or `dc_*`/`p_*` for emitters of that kind owned by
 * the subscription's owner.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { maxTimeMs } from "../clock.ts";
import type { EventRecorder } from "../domain/events/recorder.ts";
import { keptPageBytes, keptPageMost } from "../domain/events/retention.ts";
import { chargeCopies } from "../domain/sources/stored-bytes.ts";
import type { Delivery, EventRecord, EventWindow, ListenerKind, Subscription } from "../domain/types.ts";
import { AppError } from "../errors.ts";
import { newSortableId } from "../ids.ts";
import type { StorageOps } from "../storage/port.ts";

/**
 * The delivery being handled while a listener source runs, so that what it emits is routed one hop
 * further (the loop guard counts those hops). Committer jobs run in the context of their submitter.
 */
export const deliveryContext = new AsyncLocalStorage<{ hops: number }>();

/** Source-to-source hops a routed event may take; a delivery beyond it is refused (a subscription loop). */
export const maxSourceHops = 8;

export function listenerKindOf(listenerId: string): ListenerKind | undefined {
  if (listenerId.startsWith("wh_")) return "webhook";
  if (listenerId.startsWith("dc_")) return "source";
  if (listenerId.startsWith("p_")) return "workflow";
  return undefined;
}

/** The delivery of `event` that `sub` routes (undefined for a listener of no known kind). */
export function newDelivery(
  sub: Subscription,
  event: EventRecord,
  hops: number,
  nowMs: number,
  trace?: string,
): Delivery | undefined {
  const kind = listenerKindOf(sub.listenerId);
  if (!kind) return undefined;
  const d: Delivery = {
    id: newSortableId("del", nowMs),
    ownerId: sub.ownerId,
    subscriptionId: sub.id,
    emitterId: event.emitterId,
    eventId: event.id,
    channel: event.channel,
    listenerId: sub.listenerId,
    listenerKind: kind,
    event: event.event,
    meta: event.meta,
    indexedAtMs: event.indexedAtMs,
    hops,
    status: "pending",
    attempts: 0,
    roundAttempts: 0,
    nextAttemptMs: deliverAt(event, nowMs),
    lastStatusCode: null,
    lastError: null,
    lastDurationMs: null,
    claimedBy: null,
    createdMs: nowMs,
    updatedMs: nowMs,
  };
  // The span of the commit storing the event, when traces are on: each attempt continues its trace.
  if (trace !== undefined) d.trace = trace;
  return d;
}

/**
 * When an event is first due: its `delivery_ts` (Pipedream's scheduled emits) when that is later than
 * now. Until then it waits as a pending delivery that is not yet due for its first attempt; such a
 * delivery does not hold back later ones of its subscription (`claimDeliveries` in each store driver's
 * deliveries.ts). Never past `maxTimeMs`, which the executor holds `delivery_ts` to already: a larger
 * number failed the event's commit on PostgreSQL (bigint) and was unreadable on SQLite (past 2^53).
 */
function deliverAt(event: EventRecord, nowMs: number): number {
  const at = event.meta.delivery_ts;
  return typeof at === "number" && Number.isFinite(at) && at > nowMs
    ? Math.min(Math.floor(at), maxTimeMs)
    : nowMs;
}

/**
 * Asked, inside the transaction that stores an event, for each delivery routing writes: true when this
 * node's dispatcher takes it at once (it marked the delivery claimed, so the row is written claimed and
 * the dispatcher sends it once the transaction committed), false to leave it to the next claim.
 */
export type ClaimAtRouting = (d: Delivery) => boolean;

/** Writes the deliveries of a newly stored event; returns them, and those `claim` took. */
export async function routeEvent(
  tx: StorageOps,
  event: EventRecord,
  claim?: ClaimAtRouting,
  trace?: string,
): Promise<{ deliveries: Delivery[]; claimed: Delivery[] }> {
  const owner = await tx.resourceOwner(event.emitterId);
  const subs = await tx.matchSubscriptions(event.emitterId, owner, event.channel);
  if (subs.length === 0) return { deliveries: [], claimed: [] };
  const hops = (deliveryContext.getStore()?.hops ?? 0) + 1;
  const deliveries: Delivery[] = [];
  for (const sub of subs) {
    // A glob never hands a source its own events (that would be a loop nobody asked for); naming the
    // source itself as emitter still does.
    if (sub.emitterId !== event.emitterId && sub.listenerId === event.emitterId) continue;
    const d = newDelivery(sub, event, hops, event.indexedAtMs, trace);
    if (d) deliveries.push(d);
  }
  const claimed = claim ? deliveries.filter((d) => claim(d)) : [];
  await tx.insertDeliveries(deliveries);
  return { deliveries, claimed };
}

/**
 * What storing an event routed: whether some delivery was left to the claims, every delivery made (their
 * source listeners are read only with several nodes), and those claimed at once.
 */
const routed = new WeakMap<EventRecord, { queued: boolean; deliveries: Delivery[]; claimed: Delivery[] }>();

/** Whether storing `event` queued deliveries for the claims: the dispatcher wakes for those events only. */
export function queuedDeliveries(event: EventRecord): boolean {
  return routed.get(event)?.queued ?? false;
}

/** The sources that storing `event` queued deliveries for (with several nodes, another may run them). */
export function queuedSourceListeners(event: EventRecord): readonly string[] {
  const deliveries = routed.get(event)?.deliveries ?? [];
  return deliveries.filter((d) => d.listenerKind === "source").map((d) => d.listenerId);
}

/** The deliveries of `event` that this node's dispatcher claimed as they were routed (`ClaimAtRouting`). */
export function deliveriesClaimedAtRouting(event: EventRecord): readonly Delivery[] {
  return routed.get(event)?.claimed ?? [];
}

/** Routes every event the recorder stores, inside its transaction; `claim` may take deliveries at once. */
export function registerRouting(recorder: EventRecorder, claim?: ClaimAtRouting): void {
  recorder.onStore(async (tx, event, trace) => {
    const { deliveries, claimed } = await routeEvent(tx, event, claim, trace);
    if (deliveries.length > 0)
      routed.set(event, { queued: claimed.length < deliveries.length, deliveries, claimed });
  });
}

/**
 * Refuses (409, rolling its transaction back) a subscription just stored past the cap on listeners per
 * emitter: each listener gets its own copy of every event the emitter stores, written in the commit that
 * stores them, so the listeners multiply what one run costs the store (docs/delivery.md). A glob, or an
 * auto-subscription (`emitter` `dc_*`), is counted against every source it covers.
 */
export async function checkListenerCap(
  tx: StorageOps,
  emitter: string,
  ownerId: string,
  cap: number,
): Promise<void> {
  const glob = emitter.endsWith("_*");
  const emitterOwner = glob ? ownerId : await tx.resourceOwner(emitter);
  if (emitterOwner === undefined) return;
  // Two subscriptions made at once on PostgreSQL must not both see room for one.
  await tx.acquireTransactionLock(`listeners:${emitterOwner}`);
  const n = await tx.countListeners(emitter, emitterOwner);
  if (n <= cap) return;
  const which = glob ? `one of the ${emitter} emitters it covers` : emitter;
  throw new AppError(
    "conflict",
    `At most ${cap} subscriptions may route the events of one emitter, and ${which} has that many already ` +
      "(FOUNT_MAX_LISTENERS_PER_EMITTER); delete one first",
    { details: { field: "emitter_id", limit: cap } },
  );
}

/** Events a backfill queues at most: its emitter's newest, as many as a bulk replay sends (replay.ts). */
export const maxBackfilledEvents = 10_000;
/**
 * Event JSON a backfill queues at most. It is written in the subscription's transaction, which holds the
 * store meanwhile: 32 MiB took 0.3–0.7 s on SQLite, as a busy run's commit does (docs/delivery.md).
 */
export const maxBackfilledBytes = 32 * 1024 * 1024;

/**
 * Enqueues a concrete emitter's newest kept events of the subscription's channel for its listener, oldest
 * first (subscription backfill): at most `maxBackfilledEvents` of its `window` (its retention), and the
 * newest that fit in `maxBackfilledBytes`; returns how many. Run it in the transaction that stores the
 * subscription, so that events stored later queue behind these.
 */
export async function enqueueBackfill(
  tx: StorageOps,
  sub: Subscription,
  nowMs: number,
  window: EventWindow,
  /** A free account whose daily stored bytes the copies count in (`storedBytesPayer`), or none. */
  payer?: string,
): Promise<number> {
  const events = await newestKept(tx, sub.emitterId, sub.eventName, window);
  // Oldest first, so that the deliveries' sortable IDs and rows follow the events' order.
  const deliveries: Delivery[] = [];
  for (const event of events.reverse()) {
    const d = newDelivery(sub, event, 1, nowMs);
    if (d) deliveries.push(d);
  }
  for (let i = 0; i < deliveries.length; i += backfillWriteRows)
    await tx.insertDeliveries(deliveries.slice(i, i + backfillWriteRows));
  await chargeCopies(tx, payer, deliveries, nowMs);
  return deliveries.length;
}

/** Deliveries a backfill hands the store per call (it writes them in statements of its own size). */
const backfillWriteRows = 1000;

/**
 * A channel's newest kept events, newest first, within the backfill's bounds (count and bytes), read
 * as `keptPages` reads: pages the store cuts at `keptPageBytes` by the events' sizes.
 */
async function newestKept(
  tx: StorageOps,
  emitterId: string,
  channel: string,
  window: EventWindow,
): Promise<EventRecord[]> {
  const kept: EventRecord[] = [];
  let bytes = 0;
  let after: { ms: number; seq: number } | undefined;
  for (;;) {
    const limit = Math.min(keptPageMost, maxBackfilledEvents - kept.length);
    const page = await tx.listEvents(emitterId, {
      channel,
      limit,
      maxBytes: keptPageBytes,
      window,
      ...(after ? { after } : {}),
    });
    for (const event of page.items) {
      const eventBytes = JSON.stringify(event.event)?.length ?? 4;
      if (bytes + eventBytes > maxBackfilledBytes) return kept;
      bytes += eventBytes;
      kept.push(event);
    }
    const oldest = page.items.at(-1);
    // A page cut by its bytes is short with more behind it: only an empty page, or the count, ends it.
    if (!oldest || kept.length >= maxBackfilledEvents) return kept;
    after = { ms: oldest.idMs, seq: oldest.idSeq };
  }
}
