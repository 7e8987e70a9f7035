/** Subscriptions route an emitter's channel to a listener; auto-subscriptions cover emitters created later. */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { Type } from "typebox";
import {
  checkListenerCap,
  enqueueBackfill,
  maxBackfilledBytes,
  maxBackfilledEvents,
} from "../../delivery/routing.ts";
import { SubscriptionSweep } from "../../delivery/subscription-sweep.ts";
import { normalizeChannel } from "../../domain/events/channels.ts";
import { storedBytesPayer } from "../../domain/sources/quota-hold.ts";
import type { AutoSubscription, Subscription } from "../../domain/types.ts";
import { AppError, invalidParameter, notFound } from "../../errors.ts";
import { newId } from "../../ids.ts";
import type { StorageOps } from "../../storage/port.ts";
import { deliveryDeleteBatch } from "../../storage/subscription-deletes.ts";
import {
  actingOwner,
  canSee,
  commonParams,
  errorResponses,
  type ListQuery,
  listQuerystring,
  pageEnvelope,
  pageParams,
  pageQuery,
  pageResponse,
  params,
  principal,
  trimPage,
  visibleOwners,
} from "../conventions.ts";

const subscriptionSchema = Type.Object(
  { id: Type.String(), emitter_id: Type.String(), listener_id: Type.String(), event_name: Type.String() },
  { description: "Subscription" },
);
const autoSubscriptionSchema = Type.Object({
  id: Type.String(),
  listener_id: Type.String(),
  event_name: Type.String(),
  created_at: Type.Integer(),
});

const emitterId = Type.String({
  pattern: "^(dc|p)_([A-Za-z0-9]+|\\*)$",
  maxLength: 64,
  description: "Source or workflow ID, or dc_* / p_*",
});
const listenerId = Type.String({
  pattern: "^(dc|p|wh)_[A-Za-z0-9]+$",
  maxLength: 64,
  description: "Source, workflow or webhook ID",
});
const eventName = Type.String({
  maxLength: 64,
  description: "Channel: empty or default, $errors, $logs, or a custom name",
});

/**
 * Backfills one owner may start per hour. Each copies up to 32 MiB in one store transaction, and
 * deleting the subscription lets the same pair be created again at once: without a rate, a loop of
 * create (backfill) and delete rewrote that much per request (docs/delivery.md, "Backfill"). Per owner,
 * not per emitter and listener, because new webhooks make new pairs for free. Ten covers setting up a
 * handful of listeners, and a retry or two, in one sitting.
 */
export const backfillsPerHour = 10;
const hourMs = 3_600_000;

/**
 * Counts a backfill of `ownerId` in the store's rate-limit windows (`rate_limits`, which every node and
 * restart shares), or answers 429 past `backfillsPerHour` in the owner's hour. Called inside the
 * transaction that copies the backfill, so that a request that fails or is refused takes nothing: its
 * count rolls back with it (the store has no way to take a count back later). On PostgreSQL the counted
 * row stays locked until that transaction ends, so one owner's concurrent backfills count one at a time.
 * The window keeps its end, so the API limiter's prune of ended windows leaves it for its hour.
 */
async function countBackfill(tx: StorageOps, ownerId: string, nowMs: number): Promise<void> {
  const { count, windowStartMs } = await tx.countRateLimitHit(`backfill:${ownerId}`, nowMs, hourMs);
  if (count <= backfillsPerHour) return;
  const retryAfter = Math.max(1, Math.ceil((windowStartMs + hourMs - nowMs) / 1000));
  throw new AppError(
    "rate_limited",
    `At most ${backfillsPerHour} backfills an hour per account: retry in ${retryAfter} s, or subscribe without backfill (and replay the events you need)`,
    {
      details: { field: "backfill", retry_after_seconds: retryAfter },
      headers: { "retry-after": String(retryAfter) },
    },
  );
}

export function renderSubscription(s: Subscription): Record<string, unknown> {
  return { id: s.id, emitter_id: s.emitterId, listener_id: s.listenerId, event_name: s.eventName };
}

function renderAuto(a: AutoSubscription): Record<string, unknown> {
  return { id: a.id, listener_id: a.listenerId, event_name: a.eventName, created_at: a.createdAt };
}

export async function subscriptionRoutes(app: FastifyInstance): Promise<void> {
  const { store, clock, config } = app.fount;
  const tags = ["subscriptions"];
  const now = () => Math.floor(clock.now() / 1000);
  // What a delete leaves of a large backlog is swept in batches, and what a restart interrupted on start.
  const sweep = new SubscriptionSweep(store, (err) => app.log.error({ err }, "subscription sweep failed"));
  app.addHook("onReady", async () => sweep.kick());
  app.addHook("onClose", async () => sweep.stop());

  /** A concrete ID must name a resource the caller can see; unknown and foreign look the same. */
  async function requireVisible(request: FastifyRequest, id: string, what: string): Promise<void> {
    if (id.endsWith("_*")) return;
    if (!canSee(request, await store.resourceOwner(id))) throw notFound(what, id);
  }

  app.post(
    "/subscriptions",
    {
      schema: {
        tags,
        summary: "Subscribe a listener to an emitter's channel",
        description:
          "Parameters may be sent in the query string (as Pipedream's clients do) or the JSON body. Creating the same subscription twice returns the existing one, unchanged (a backfill asked for again is not queued again). " +
          `At most ${config.maxListenersPerEmitter} subscriptions (FOUNT_MAX_LISTENERS_PER_EMITTER) may route one emitter's events, a dc_* or p_* glob counting for each emitter it covers: one more is a 409 (docs/delivery.md). ` +
          `An account may start at most ${backfillsPerHour} backfills an hour (counted in the store, for every node): one more is a 429 with Retry-After, and the subscription is not created.`,
        body: Type.Object(
          {
            ...commonParams,
            emitter_id: emitterId,
            listener_id: listenerId,
            event_name: Type.Optional(eventName),
            backfill: Type.Optional(
              Type.Boolean({
                description: `Extension: on creating the subscription, first deliver the emitter's newest retained events of the channel (at most ${maxBackfilledEvents}, and ${maxBackfilledBytes / 1024 / 1024} MiB of event JSON), oldest first (a concrete emitter_id only)`,
              }),
            ),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({ data: Type.Partial(subscriptionSchema) }),
          ...errorResponses(404, 409),
        },
      },
    },
    async (request) => {
      const p = params<{
        emitter_id: string;
        listener_id: string;
        event_name?: string;
        org_id?: string;
        backfill?: boolean;
      }>(request);
      if (p.backfill && p.emitter_id.endsWith("_*")) {
        throw invalidParameter("backfill", "backfill needs a concrete emitter_id, not a glob");
      }
      const channel = normalizeChannel(p.event_name);
      const ownerId = actingOwner(request, p.org_id);
      await requireVisible(request, p.emitter_id, "Emitter");
      await requireVisible(request, p.listener_id, "Listener");
      // A free account's backfill copies count in its stored bytes: past the day's, nothing is created.
      const payer = p.backfill ? await storedBytesPayer(app.fount, principal(request).user.id) : undefined;
      // One transaction: backfilled events queue ahead of any event stored after the subscription.
      const { sub, backfilled } = await store.transaction(async (tx) => {
        const id = newId("sub");
        const sub = await tx.upsertSubscription({
          id,
          ownerId,
          emitterId: p.emitter_id,
          listenerId: p.listener_id,
          eventName: channel,
          createdAt: now(),
        });
        // An existing subscription is returned as it is: the listener has its events already.
        if (sub.id !== id) return { sub, backfilled: 0 };
        await checkListenerCap(tx, sub.emitterId, ownerId, config.maxListenersPerEmitter);
        if (!p.backfill) return { sub, backfilled: 0 };
        const window = await app.fount.retention.windowOf(tx, sub.emitterId, channel);
        // A backfill that finds nothing to copy is not counted.
        const any = await tx.listEvents(sub.emitterId, { channel, limit: 1, window });
        if (any.items.length > 0) await countBackfill(tx, ownerId, clock.now());
        return { sub, backfilled: await enqueueBackfill(tx, sub, clock.now(), window, payer) };
      });
      if (backfilled > 0) app.fount.dispatcher.wake();
      return { data: renderSubscription(sub) };
    },
  );

  app.delete(
    "/subscriptions",
    {
      schema: {
        tags,
        summary: "Delete subscriptions (pass event_name= for one made without a name)",
        description: `With their pending deliveries: up to ${deliveryDeleteBatch} of each at once, a larger backlog after the answer, in batches, none of it sent meanwhile (docs/delivery.md).`,
        querystring: Type.Object(
          {
            ...commonParams,
            emitter_id: emitterId,
            listener_id: listenerId,
            event_name: Type.Optional(eventName),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({ data: Type.Array(Type.Partial(subscriptionSchema)) }),
          ...errorResponses(404),
        },
      },
    },
    async (request) => {
      const q = request.query as {
        emitter_id: string;
        listener_id: string;
        event_name?: string;
        org_id?: string;
      };
      const owners = q.org_id ? [actingOwner(request, q.org_id)] : visibleOwners(request);
      // One transaction: the subscriptions, a batch of what they had not delivered, and a mark on the
      // rest (none of it is claimed from then on), which the sweep deletes a batch a transaction.
      const match = {
        emitterId: q.emitter_id,
        listenerId: q.listener_id,
        eventName: normalizeChannel(q.event_name),
      };
      const removed = await store.transaction((tx) => tx.deleteSubscriptions(owners, match));
      if (removed.length === 0) throw notFound("Subscription");
      // Deliveries of theirs this node (or another) holds in memory are not sent from now on.
      app.fount.bus.emit("deliveries.withdrawn", { subscriptionIds: removed.map((s) => s.id) });
      sweep.kick();
      return { data: removed.map(renderSubscription) };
    },
  );

  app.post(
    "/auto_subscriptions",
    {
      schema: {
        tags,
        summary: "Subscribe a listener to a channel of every source and workflow created from now on",
        description:
          "Each source and workflow created later gets one subscription per auto-subscription, so they count against its cap on listeners (FOUNT_MAX_LISTENERS_PER_EMITTER): past it, a 409 (docs/delivery.md).",
        body: Type.Object(
          { ...commonParams, listener_id: listenerId, event_name: eventName },
          { additionalProperties: false },
        ),
        response: { 200: Type.Object({ data: autoSubscriptionSchema }), ...errorResponses(404, 409) },
      },
    },
    async (request) => {
      const p = params<{ listener_id: string; event_name: string; org_id?: string }>(request);
      const ownerId = actingOwner(request, p.org_id);
      await requireVisible(request, p.listener_id, "Listener");
      const rule = await store.transaction(async (tx) => {
        const id = newId("asub");
        const rule = await tx.upsertAutoSubscription({
          id,
          ownerId,
          listenerId: p.listener_id,
          eventName: normalizeChannel(p.event_name),
          createdAt: now(),
        });
        // Each source and workflow created from now on gets a subscription per rule: they count against its cap.
        if (rule.id === id)
          for (const glob of ["dc_*", "p_*"])
            await checkListenerCap(tx, glob, ownerId, config.maxListenersPerEmitter);
        return rule;
      });
      return { data: renderAuto(rule) };
    },
  );

  const listResponse = { 200: pageResponse(subscriptionSchema), ...errorResponses(404) };
  app.get(
    "/users/me/subscriptions",
    {
      schema: {
        tags,
        summary: "List the user's subscriptions (newest first)",
        querystring: listQuerystring(),
        response: listResponse,
      },
    },
    async (request) => {
      const q = request.query as ListQuery;
      const owner = q.org_id ? actingOwner(request, q.org_id) : principal(request).user.id;
      const pq = pageQuery(q);
      return pageEnvelope(trimPage(await store.listSubscriptions([owner], pq), pq), renderSubscription);
    },
  );
  app.get(
    "/orgs/:org_id/subscriptions",
    {
      schema: {
        tags,
        summary: "List an organization's subscriptions (newest first)",
        params: Type.Object({ org_id: Type.String({ pattern: "^o_[A-Za-z0-9]+$", maxLength: 64 }) }),
        querystring: Type.Object(
          { include: commonParams.include, exclude: commonParams.exclude, ...pageParams },
          { additionalProperties: false },
        ),
        response: listResponse,
      },
    },
    async (request) => {
      const { org_id } = request.params as { org_id: string };
      const pq = pageQuery(request.query as ListQuery);
      const page = trimPage(await store.listSubscriptions([actingOwner(request, org_id)], pq), pq);
      return pageEnvelope(page, renderSubscription);
    },
  );
}
