/**
 * A webhook's deliveries: every attempt, newest first (filtered by status, time and status code), and
 * redelivery of one or of all that failed since a time. One delivery in full, an event's deliveries and
 * replay are in delivery-history.ts and replays.ts.
 */
import type { FastifyInstance } from "fastify";
import { Type } from "typebox";
import { listedResponseChars } from "../../delivery/attempt-record.ts";
import { requeueFailed } from "../../delivery/replay.ts";
import {
  type Delivery,
  type DeliveryAttempt,
  type DeliveryStatus,
  deliveryStatuses,
  type WithSeq,
} from "../../domain/types.ts";
import { AppError, notFound } from "../../errors.ts";
import type { DeliverySearch, Storage } from "../../storage/port.ts";
import {
  commonParams,
  errorResponses,
  type ListPage,
  type ListQuery,
  pageEnvelope,
  pageParams,
  pageQuery,
  pageResponse,
  params,
  trimPage,
} from "../conventions.ts";
import { parseStatusCode, parseTime, statusCodeParam, timeParam } from "../history-params.ts";
import { visibleWebhook } from "./webhooks.ts";

const attemptSchema = Type.Object({
  attempt: Type.Integer({ description: "1 for the first attempt" }),
  started_at: Type.Integer(),
  duration_ms: Type.Integer(),
  status_code: Type.Union([Type.Integer(), Type.Null()]),
  error: Type.Union([Type.String(), Type.Null()]),
  response: Type.Union([Type.String(), Type.Null()], {
    description: "The first 512 characters of the answer",
  }),
  outcome: Type.Union([Type.Literal("succeeded"), Type.Literal("retry"), Type.Literal("failed")]),
  replay: Type.Boolean({ description: "An attempt of a replayed delivery" }),
});

/** How a delivery came to be, when it was replayed rather than routed. */
export const replaySchema = Type.Union(
  [
    Type.Object({
      id: Type.String({ description: "rpl_…: the replay request" }),
      replayed_from: Type.Union([Type.String(), Type.Null()], {
        description: "The newest earlier delivery of the event to this listener, when one was kept",
      }),
    }),
    Type.Null(),
  ],
  { description: "Set on a replayed delivery; null on a routed one" },
);

/** The fields of a delivery every rendering has (the list's `attempt_history` or the full `attempts`). */
export const deliveryFields = {
  id: Type.String({ description: "del_…; also the webhook-id header, the same on every attempt" }),
  event_id: Type.String(),
  emitter_id: Type.String(),
  event_name: Type.String({ description: "Channel; empty for the default one" }),
  listener_id: Type.String(),
  status: Type.Union([Type.Literal("pending"), Type.Literal("succeeded"), Type.Literal("failed")]),
  attempts: Type.Integer(),
  last_status_code: Type.Union([Type.Integer(), Type.Null()]),
  last_error: Type.Union([Type.String(), Type.Null()]),
  duration_ms: Type.Union([Type.Integer(), Type.Null()], { description: "Duration of the last attempt" }),
  next_attempt_at: Type.Union([Type.Integer(), Type.Null()], {
    description: "Epoch seconds; null once finished",
  }),
  created_at: Type.Integer(),
  updated_at: Type.Integer(),
  replay: replaySchema,
};

export const deliverySchema = Type.Object(
  { ...deliveryFields, attempt_history: Type.Array(attemptSchema) },
  { description: "Delivery" },
);

export const webhookId = Type.String({ pattern: "^wh_[A-Za-z0-9]+$", maxLength: 64 });
export const deliveryId = Type.String({ pattern: "^del_[A-Za-z0-9]+$", maxLength: 64 });

/** The filters a deliveries list takes besides paging (`status`, `since`, `until`, `status_code`). */
export const deliveryFilters = {
  status: Type.Optional(
    Type.Union(
      deliveryStatuses.map((s) => Type.Literal(s)),
      { description: "Only this status" },
    ),
  ),
  since: Type.Optional(timeParam("Created at or after")),
  until: Type.Optional(timeParam("Created before")),
  status_code: Type.Optional(statusCodeParam),
};

/** The filters of a list request, as a store search (to which the route adds a listener or an event). */
export function deliverySearchOf(q: {
  status?: DeliveryStatus;
  since?: string | number;
  until?: string | number;
  status_code?: string;
}): Omit<DeliverySearch, "listenerId" | "event"> {
  return {
    status: q.status,
    sinceMs: parseTime(q.since, "since"),
    untilMs: parseTime(q.until, "until"),
    statusCode: parseStatusCode(q.status_code),
  };
}

const seconds = (ms: number) => Math.floor(ms / 1000);

/** The fields of `deliveryFields`: all of a delivery but its attempts. */
export function renderDeliveryFields(d: Delivery): Record<string, unknown> {
  return {
    id: d.id,
    event_id: d.eventId,
    emitter_id: d.emitterId,
    event_name: d.channel,
    listener_id: d.listenerId,
    status: d.status,
    attempts: d.attempts,
    last_status_code: d.lastStatusCode,
    last_error: d.lastError,
    duration_ms: d.lastDurationMs,
    next_attempt_at: d.status === "pending" && d.nextAttemptMs !== null ? seconds(d.nextAttemptMs) : null,
    created_at: seconds(d.createdMs),
    updated_at: seconds(d.updatedMs),
    replay: d.replayId ? { id: d.replayId, replayed_from: d.replayedFrom ?? null } : null,
  };
}

export function renderDelivery(d: Delivery, attempts: DeliveryAttempt[]): Record<string, unknown> {
  return {
    ...renderDeliveryFields(d),
    attempt_history: attempts.map((a) => ({
      attempt: a.n,
      started_at: seconds(a.startedMs),
      duration_ms: a.durationMs,
      status_code: a.statusCode,
      error: a.error,
      // The list stays light (its reads take the start of each answer): the whole kept answer is in
      // the delivery's own route.
      response: a.response === null ? null : a.response.slice(0, listedResponseChars),
      outcome: a.outcome,
      replay: Boolean(d.replayId),
    })),
  };
}

/** A page of deliveries as a list answers it, each with its attempts (the start of each answer). */
export async function deliveriesPage(store: Storage, page: ListPage<WithSeq<Delivery>>) {
  const attempts = await store.listDeliveryAttempts(
    page.items.map((d) => d.id),
    listedResponseChars,
  );
  const byDelivery = Map.groupBy(attempts, (a) => a.deliveryId);
  return pageEnvelope(page, (d) => renderDelivery(d, byDelivery.get(d.id) ?? []));
}

export async function deliveryRoutes(app: FastifyInstance): Promise<void> {
  const { store, clock, dispatcher } = app.fount;
  const tags = ["webhooks"];

  async function render(delivery: Delivery): Promise<Record<string, unknown>> {
    return renderDelivery(delivery, await store.listDeliveryAttempts([delivery.id], listedResponseChars));
  }

  app.get(
    "/webhooks/:id/deliveries",
    {
      schema: {
        tags,
        summary: "List a webhook's deliveries (newest first) with their attempts",
        description:
          "Filters: status, since and until (creation time), status_code (the last attempt's, e.g. 503 or 5xx).",
        params: Type.Object({ id: webhookId }),
        querystring: Type.Object(
          { ...commonParams, ...pageParams, ...deliveryFilters },
          { additionalProperties: false },
        ),
        response: {
          200: pageResponse(deliverySchema),
          ...errorResponses(404),
        },
      },
    },
    async (request) => {
      const { id } = request.params as { id: string };
      const q = request.query as Parameters<typeof deliverySearchOf>[0] & ListQuery;
      const cursor = pageQuery(q);
      const search = deliverySearchOf(q);
      const webhook = await visibleWebhook(app, request, id);
      const page = trimPage(
        await store.searchDeliveries({ ...search, listenerId: webhook.id }, cursor),
        cursor,
      );
      return deliveriesPage(store, page);
    },
  );

  app.post(
    "/webhooks/:id/deliveries/:delivery_id/redeliver",
    {
      schema: {
        tags,
        summary: "Send a delivery again now (any status), with a fresh retry schedule",
        description:
          "The delivery keeps its id, so the receiver sees the same webhook-id. 409 while it is being attempted.",
        params: Type.Object({ id: webhookId, delivery_id: deliveryId }),
        body: Type.Object(commonParams, { additionalProperties: false }),
        response: { 200: Type.Object({ data: Type.Partial(deliverySchema) }), ...errorResponses(404, 409) },
      },
    },
    async (request) => {
      const { id, delivery_id } = request.params as { id: string; delivery_id: string };
      const webhook = await visibleWebhook(app, request, id);
      const delivery = await store.getDelivery(delivery_id);
      if (!delivery || delivery.listenerId !== webhook.id) throw notFound("Delivery", delivery_id);
      if (!(await store.requeueDelivery(delivery.id, clock.now()))) {
        throw new AppError(
          "conflict",
          "The delivery is being attempted right now; try again when it finished",
        );
      }
      dispatcher.wake();
      return { data: await render((await store.getDelivery(delivery.id)) ?? delivery) };
    },
  );

  app.post(
    "/webhooks/:id/redeliver",
    {
      schema: {
        tags,
        summary: "Send again every delivery of the webhook that failed, created since a time",
        params: Type.Object({ id: webhookId }),
        body: Type.Object(
          {
            ...commonParams,
            since: Type.Integer({
              minimum: 0,
              maximum: 1e11,
              description: "Epoch seconds: deliveries created at or after it",
            }),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({
            data: Type.Object({ count: Type.Integer({ description: "Deliveries queued again" }) }),
          }),
          ...errorResponses(404),
        },
      },
    },
    async (request) => {
      const { id } = request.params as { id: string };
      const { since } = params<{ since: number }>(request);
      const webhook = await visibleWebhook(app, request, id);
      const count = await requeueFailed(store, webhook.id, since * 1000, clock.now());
      if (count > 0) dispatcher.wake();
      return { data: { count } };
    },
  );
}
