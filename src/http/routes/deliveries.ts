/** A webhook's deliveries: every attempt, newest first, and redelivery of one or of all that failed since a time. */
import type { FastifyInstance } from "fastify";
import { Type } from "typebox";
import type { Delivery, DeliveryAttempt, DeliveryStatus } from "../../domain/types.ts";
import { AppError, notFound } from "../../errors.ts";
import {
  commonParams,
  errorResponses,
  pageEnvelope,
  pageParams,
  pageQuery,
  pageResponse,
  params,
  trimPage,
} from "../conventions.ts";
import { visibleWebhook } from "./webhooks.ts";

const attemptSchema = Type.Object({
  attempt: Type.Integer({ description: "1 for the first attempt" }),
  started_at: Type.Integer(),
  duration_ms: Type.Integer(),
  status_code: Type.Union([Type.Integer(), Type.Null()]),
  error: Type.Union([Type.String(), Type.Null()]),
  response: Type.Union([Type.String(), Type.Null()], { description: "The first 512 bytes of the answer" }),
  outcome: Type.Union([Type.Literal("succeeded"), Type.Literal("retry"), Type.Literal("failed")]),
});

const deliverySchema = Type.Object(
  {
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
    attempt_history: Type.Array(attemptSchema),
  },
  { description: "Delivery" },
);

const webhookId = Type.String({ pattern: "^wh_[A-Za-z0-9]+$", maxLength: 64 });
const deliveryId = Type.String({ pattern: "^del_[A-Za-z0-9]+$", maxLength: 64 });
const statuses = ["pending", "succeeded", "failed"] as const;

const seconds = (ms: number) => Math.floor(ms / 1000);

export function renderDelivery(d: Delivery, attempts: DeliveryAttempt[]): Record<string, unknown> {
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
    attempt_history: attempts.map((a) => ({
      attempt: a.n,
      started_at: seconds(a.startedMs),
      duration_ms: a.durationMs,
      status_code: a.statusCode,
      error: a.error,
      response: a.response,
      outcome: a.outcome,
    })),
  };
}

export async function deliveryRoutes(app: FastifyInstance): Promise<void> {
  const { store, clock, dispatcher } = app.fount;
  const tags = ["webhooks"];

  async function render(delivery: Delivery): Promise<Record<string, unknown>> {
    return renderDelivery(delivery, await store.listDeliveryAttempts([delivery.id]));
  }

  app.get(
    "/webhooks/:id/deliveries",
    {
      schema: {
        tags,
        summary: "List a webhook's deliveries (newest first) with their attempts",
        params: Type.Object({ id: webhookId }),
        querystring: Type.Object(
          {
            ...commonParams,
            ...pageParams,
            status: Type.Optional(
              Type.Union(
                statuses.map((s) => Type.Literal(s)),
                { description: "Only this status" },
              ),
            ),
          },
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
      const q = request.query as { limit?: number; after?: string; before?: string; status?: DeliveryStatus };
      const cursor = pageQuery(q);
      const webhook = await visibleWebhook(app, request, id);
      const page = trimPage(await store.listDeliveries(webhook.id, cursor, q.status), cursor);
      const attempts = await store.listDeliveryAttempts(page.items.map((d) => d.id));
      const byDelivery = Map.groupBy(attempts, (a) => a.deliveryId);
      return pageEnvelope(page, (d) => renderDelivery(d, byDelivery.get(d.id) ?? []));
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
      const count = await store.requeueFailedDeliveries(webhook.id, since * 1000, clock.now());
      if (count > 0) dispatcher.wake();
      return { data: { count } };
    },
  );
}
