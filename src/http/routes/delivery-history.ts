/**
 * Every delivery attempt, inspectable (docs/delivery.md, "Attempts"): one delivery with what each
 * attempt sent and got back, by its webhook or by its ID alone; one stored event; and an event's
 * deliveries. A delivery links to its event and its listener, an event to its deliveries.
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { Type } from "typebox";
import { sentHeaders } from "../../delivery/http-sender.ts";
import type { Delivery, DeliveryAttempt } from "../../domain/types.ts";
import { notFound } from "../../errors.ts";
import {
  canSee,
  commonParams,
  errorResponses,
  type ListQuery,
  pageParams,
  pageQuery,
  pageResponse,
  trimPage,
  visibleOr404,
  visibleOwners,
} from "../conventions.ts";
import { eventEntrySchema, renderEvent } from "../event-entries.ts";
import { keptEvent } from "../event-search-pages.ts";
import {
  deliveriesPage,
  deliveryFields,
  deliveryFilters,
  deliveryId,
  deliverySchema,
  deliverySearchOf,
  renderDeliveryFields,
  webhookId,
} from "./deliveries.ts";
import { sourceIdParams, visibleSource } from "./sources.ts";
import { visibleWebhook } from "./webhooks.ts";

const nullable = <T extends Parameters<typeof Type.Union>[0][number]>(t: T) => Type.Union([t, Type.Null()]);
const headers = nullable(Type.Record(Type.String(), Type.Unknown()));

const attemptDetailSchema = Type.Object({
  n: Type.Integer({ description: "1 for the first attempt" }),
  at_ms: Type.Integer({ description: "When it started, epoch ms" }),
  duration_ms: Type.Integer(),
  request: Type.Object({
    url: nullable(Type.String()),
    headers: Type.Union([Type.Record(Type.String(), Type.String()), Type.Null()], {
      description: "The headers Fount set, the signature among them; null for a source listener's run",
    }),
    body: Type.String({ description: "The body sent: the delivery's copy of the event, as JSON" }),
  }),
  response: Type.Union(
    [
      Type.Object({
        status: Type.Integer(),
        headers,
        body: nullable(Type.String({ description: "The first 64 KB of the answer" })),
        truncated: Type.Boolean({ description: "The answer was longer than what is kept" }),
      }),
      Type.Null(),
    ],
    { description: "Null when no answer came (timeout, network error, refused, a source's run)" },
  ),
  error: nullable(Type.String()),
  error_kind: nullable(
    Type.String({
      description: "dns, tls, timeout, refused, reset, network, guard, http, url, run, internal",
    }),
  ),
  outcome: Type.Union([Type.Literal("succeeded"), Type.Literal("retry"), Type.Literal("failed")]),
  replay: Type.Boolean({ description: "An attempt of a replayed delivery" }),
});

const deliveryDetailSchema = Type.Object(
  {
    ...deliveryFields,
    attempts: Type.Array(attemptDetailSchema, { description: "Every attempt, oldest first" }),
    attempt_count: Type.Integer({ description: "Attempts made in all" }),
    listener_kind: Type.Union([Type.Literal("webhook"), Type.Literal("source"), Type.Literal("workflow")]),
    links: Type.Object({
      event: nullable(Type.String({ description: "The event, while its source keeps it" })),
      event_deliveries: nullable(Type.String({ description: "Every delivery of the event" })),
      listener: Type.String(),
    }),
  },
  { description: "Delivery with its attempts" },
);

const eventId = Type.String({ pattern: "^[0-9]{1,15}-[0-9]{1,9}$", maxLength: 40 });

/** A source (by ID or slug) and one of its event IDs. */
export const sourceEventParams = Type.Object({ id: sourceIdParams.properties.id, event_id: eventId });

const listenerPaths = { webhook: "webhooks", source: "sources", workflow: "workflows" } as const;

/** A delivery with every attempt in full: what was sent, what came back, and links to its neighbours. */
export function renderDeliveryDetail(d: Delivery, attempts: DeliveryAttempt[]): Record<string, unknown> {
  // The body is the same on every attempt: the delivery's own copy of the event, sent as JSON.
  const body = JSON.stringify(d.event ?? null);
  const eventPath = d.emitterId.startsWith("dc_") ? `/v1/sources/${d.emitterId}/events/${d.eventId}` : null;
  return {
    ...renderDeliveryFields(d),
    attempts: attempts.map((a) => ({
      n: a.n,
      at_ms: a.startedMs,
      duration_ms: a.durationMs,
      request: { url: a.detail?.url ?? null, headers: sentHeaders(d, a.detail?.requestHeaders), body },
      response:
        a.statusCode === null
          ? null
          : {
              status: a.statusCode,
              headers: a.detail?.responseHeaders ?? null,
              body: a.response,
              truncated: a.detail?.responseTruncated ?? false,
            },
      error: a.error,
      error_kind: a.detail?.errorKind ?? null,
      outcome: a.outcome,
      replay: Boolean(d.replayId),
    })),
    attempt_count: d.attempts,
    listener_kind: d.listenerKind,
    links: {
      event: eventPath,
      event_deliveries: eventPath && `${eventPath}/deliveries`,
      listener: `/v1/${listenerPaths[d.listenerKind]}/${d.listenerId}`,
    },
  };
}

export async function deliveryHistoryRoutes(app: FastifyInstance): Promise<void> {
  const { store, retention } = app.fount;
  const query = Type.Object(commonParams, { additionalProperties: false });
  const detailResponse = {
    200: Type.Object({ data: Type.Partial(deliveryDetailSchema) }),
    ...errorResponses(404),
  };

  async function detail(d: Delivery): Promise<{ data: Record<string, unknown> }> {
    return { data: renderDeliveryDetail(d, await store.listDeliveryAttempts([d.id])) };
  }

  /**
   * The delivery if the caller may see it: its owner (the subscription's or the replay's) is theirs, and
   * so is its listener, unless it is gone. A member who left an organization still owns deliveries to its
   * webhooks; their attempts show the webhook's URL and answers, which are no longer theirs to see.
   */
  async function visibleDelivery(request: FastifyRequest, id: string): Promise<Delivery> {
    const d = visibleOr404(request, await store.getDelivery(id), "Delivery", id);
    const listenerOwner = await store.resourceOwner(d.listenerId);
    if (listenerOwner !== undefined && !canSee(request, listenerOwner)) throw notFound("Delivery", id);
    return d;
  }

  app.get(
    "/webhooks/:id/deliveries/:delivery_id",
    {
      schema: {
        tags: ["webhooks"],
        summary: "Get one delivery of a webhook with every attempt: what was sent and what came back",
        description:
          "attempts[]: at_ms, request {url, headers, body}, response {status, headers, body, truncated} or null, duration_ms, error, error_kind. The answer's body is kept up to 64 KB; the signature is shown, the signing secret never.",
        params: Type.Object({ id: webhookId, delivery_id: deliveryId }),
        querystring: query,
        response: detailResponse,
      },
    },
    async (request) => {
      const { id, delivery_id } = request.params as { id: string; delivery_id: string };
      const webhook = await visibleWebhook(app, request, id);
      const delivery = await store.getDelivery(delivery_id);
      if (!delivery || delivery.listenerId !== webhook.id) throw notFound("Delivery", delivery_id);
      return detail(delivery);
    },
  );

  app.get(
    "/deliveries/:delivery_id",
    {
      schema: {
        tags: ["webhooks"],
        summary: "Get one delivery, to any kind of listener, with every attempt",
        description:
          "The same answer as GET /v1/webhooks/{id}/deliveries/{delivery_id}, without naming the listener.",
        params: Type.Object({ delivery_id: deliveryId }),
        querystring: query,
        response: detailResponse,
      },
    },
    async (request) => {
      const { delivery_id } = request.params as { delivery_id: string };
      return detail(await visibleDelivery(request, delivery_id));
    },
  );

  app.get(
    "/sources/:id/events/:event_id",
    {
      schema: {
        tags: ["events"],
        summary: "Get one stored event of a source, whatever its channel",
        params: sourceEventParams,
        querystring: query,
        response: { 200: Type.Object({ data: Type.Partial(eventEntrySchema) }), ...errorResponses(404) },
      },
    },
    async (request) => {
      const { id, event_id } = request.params as { id: string; event_id: string };
      const source = await visibleSource(app, request, id);
      return { data: renderEvent(await keptEvent(store, retention, source.id, event_id), true) };
    },
  );

  app.get(
    "/sources/:id/events/:event_id/deliveries",
    {
      schema: {
        tags: ["events"],
        summary: "List an event's deliveries (newest first), to every listener of the caller",
        description:
          "Also once the source no longer keeps the event: deliveries keep their own copy. Filters: listener_id (the destination), status, since and until (creation time), status_code (503 or 5xx).",
        params: sourceEventParams,
        querystring: Type.Object(
          {
            ...commonParams,
            ...pageParams,
            ...deliveryFilters,
            listener_id: Type.Optional(
              Type.String({
                pattern: "^(dc|p|wh)_[A-Za-z0-9]+$",
                maxLength: 64,
                description: "Only to this listener",
              }),
            ),
          },
          { additionalProperties: false },
        ),
        response: { 200: pageResponse(deliverySchema), ...errorResponses(404) },
      },
    },
    async (request) => {
      const { id, event_id } = request.params as { id: string; event_id: string };
      const q = request.query as Parameters<typeof deliverySearchOf>[0] &
        ListQuery & { listener_id?: string };
      const cursor = pageQuery(q);
      const search = deliverySearchOf(q);
      const source = await visibleSource(app, request, id);
      if (q.listener_id !== undefined && !canSee(request, await store.resourceOwner(q.listener_id)))
        throw notFound("Listener", q.listener_id);
      const page = trimPage(
        await store.searchDeliveries(
          {
            ...search,
            event: { emitterId: source.id, eventId: event_id },
            listenerId: q.listener_id,
            // Another member's personal listener may have deliveries of an organization's event: those
            // are theirs to see, with their URLs and answers. And the caller's own deliveries to a
            // listener they can no longer see (an organization they left) are not shown.
            ownerIds: visibleOwners(request),
            listenerOwnerIds: visibleOwners(request),
          },
          cursor,
        ),
        cursor,
      );
      return deliveriesPage(store, page);
    },
  );
}
