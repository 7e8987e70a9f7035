/**
 * External workflows (`p_…`, an extension): registered by a runner outside Fount, they are emitters and
 * listeners like sources. Events routed to one are POSTed to its `url`, signed like webhooks; the runner
 * records its emits and errors here, and they are read back through the spec's workflow event summaries.
 */
import { randomBytes } from "node:crypto";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { Type } from "typebox";
import { usageDay } from "../../domain/accounts/quotas.ts";
import { channelPattern, normalizeChannel } from "../../domain/events/channels.ts";
import { holdQuota } from "../../domain/sources/quota-hold.ts";
import { StoredBytes } from "../../domain/sources/stored-bytes.ts";
import { maxCustomChannels } from "../../domain/sources/stored-emits.ts";
import type { EventRecord, Workflow } from "../../domain/types.ts";
import { AppError, invalidParameter } from "../../errors.ts";
import { newId, randomString } from "../../ids.ts";
import {
  actingOwner,
  commonParams,
  errorResponses,
  type ListQuery,
  listQuerystring,
  pageEnvelope,
  pageQuery,
  pageResponse,
  params,
  principal,
  trimPage,
  visibleOr404,
} from "../conventions.ts";
import { eventEntrySchema, renderEvent } from "../event-entries.ts";
import { refuseOverLimit } from "../owner-limits.ts";
import { eventListQuery, eventListResponse, listEventsFor } from "./source-events.ts";
import { validateWebhookUrl } from "./webhooks.ts";

const workflowSchema = Type.Object(
  {
    id: Type.String(),
    user_id: Type.Optional(Type.String()),
    name: Type.String(),
    url: Type.Union([Type.String(), Type.Null()]),
    created_at: Type.Integer(),
    updated_at: Type.Integer(),
    signing_secret: Type.Optional(
      Type.String({ description: "whsec_…, shown only when the workflow is created" }),
    ),
  },
  { description: "Workflow" },
);

const idParams = Type.Object({ id: Type.String({ pattern: "^p_[A-Za-z0-9]+$", maxLength: 64 }) });
const platformVersion = "fount-0.1";

export function renderWorkflow(w: Workflow, withUser: boolean): Record<string, unknown> {
  return {
    id: w.id,
    ...(withUser ? { user_id: w.ownerId } : {}),
    name: w.name,
    url: w.url,
    created_at: w.createdAt,
    updated_at: w.updatedAt,
  };
}

export async function workflowRoutes(app: FastifyInstance): Promise<void> {
  const { store, secrets, clock, committer, recorder, bus, config, pruner, logger } = app.fount;
  const tags = ["workflows"];

  async function visibleWorkflow(request: FastifyRequest, id: string): Promise<Workflow> {
    return visibleOr404(request, await store.getWorkflow(id), "Workflow", id);
  }

  /**
   * Stores an event of the workflow (routed like a source's emits) and announces it. Each one counts as
   * an invocation of the workflow's creator, as a source's run does: a free account past its daily
   * quota gets `quota_exceeded` (docs/delivery.md, "External workflows").
   */
  async function record(workflow: Workflow, channel: string, event: unknown): Promise<EventRecord> {
    const size = Buffer.byteLength(JSON.stringify(event) ?? "null");
    if (size > config.maxEventBytes) {
      throw new AppError(
        "payload_too_large",
        `The event is ${size} bytes; at most ${config.maxEventBytes} are kept`,
      );
    }
    const hold = await holdQuota({ store, clock, config, logger }, workflow);
    try {
      return await committer.submit(
        async (tx) => {
          const nowMs = clock.now();
          const stored = await recorder.store(tx, { emitterId: workflow.id, channel, event, nowMs });
          // Its bytes and its delivery copies count in the day's stored bytes, as a run's emits do.
          const bytes = new StoredBytes(tx, workflow.id);
          await bytes.add(stored, size);
          await tx.addUsage(workflow.createdBy, usageDay(nowMs), {
            invocations: hold.counted ? 0 : 1,
            computeMs: 0,
            storedBytes: bytes.total,
          });
          return stored;
        },
        (stored) => bus.emit("event.stored", stored),
      );
    } catch (err) {
      hold.release();
      throw err;
    }
  }

  /**
   * Every channel keeps its own last events, so a workflow, like a source (stored-emits.ts), may use at
   * most `maxCustomChannels` named channels: else each new name would store another 100 events.
   */
  async function withinChannelLimit(workflow: Workflow, channel: string): Promise<void> {
    if (channel === "") return;
    const named = (await store.listChannels(workflow.id)).filter((c) => c !== "" && !c.startsWith("$"));
    if (named.length < maxCustomChannels || named.includes(channel)) return;
    throw invalidParameter(
      "name",
      `A workflow may use at most ${maxCustomChannels} named channels; it uses ${named.length}, and ${channel} is not one of them`,
    );
  }

  app.post(
    "/workflows",
    {
      schema: {
        tags,
        summary: "Register an external workflow (extension)",
        description:
          "Events routed to it by subscriptions are POSTed to url, signed with the signing secret returned only here. Without url they are recorded as delivered and not sent.",
        body: Type.Object(
          {
            ...commonParams,
            name: Type.String({ minLength: 1, maxLength: 256 }),
            url: Type.Optional(Type.String({ minLength: 1, maxLength: 2048 })),
          },
          { additionalProperties: false },
        ),
        response: { 200: Type.Object({ data: Type.Partial(workflowSchema) }), ...errorResponses(404, 409) },
      },
    },
    async (request) => {
      const p = params<{ name: string; url?: string; org_id?: string }>(request);
      const url = p.url === undefined ? null : validateWebhookUrl(p.url);
      const ownerId = actingOwner(request, p.org_id);
      const owned = await store.listWorkflows([ownerId], { limit: 1 });
      refuseOverLimit(config.ownerLimits, "workflows", owned.totalCount);
      const now = Math.floor(clock.now() / 1000);
      // Standard Webhooks secret, as for webhooks: `whsec_` and base64 of 24 random bytes.
      const signingSecret = `whsec_${randomBytes(24).toString("base64")}`;
      const workflow: Workflow = {
        id: newId("p"),
        ownerId,
        createdBy: principal(request).user.id,
        name: p.name,
        url,
        signingSecretSealed: secrets.seal(signingSecret),
        createdAt: now,
        updatedAt: now,
      };
      await store.transaction(async (tx) => {
        await tx.insertWorkflow(workflow);
        // Auto-subscriptions made before this workflow now cover it, as they cover a new source.
        for (const rule of await tx.listAutoSubscriptions([ownerId])) {
          await tx.upsertSubscription({
            id: newId("sub"),
            ownerId: rule.ownerId,
            emitterId: workflow.id,
            listenerId: rule.listenerId,
            eventName: rule.eventName,
            createdAt: now,
          });
        }
      });
      return { data: { ...renderWorkflow(workflow, true), signing_secret: signingSecret } };
    },
  );

  app.get(
    "/workflows/:id",
    {
      schema: {
        tags,
        summary: "Get a workflow (extension)",
        params: idParams,
        querystring: Type.Object(commonParams, { additionalProperties: false }),
        response: { 200: Type.Object({ data: Type.Partial(workflowSchema) }), ...errorResponses(404) },
      },
    },
    async (request) => {
      const { id } = request.params as { id: string };
      return { data: renderWorkflow(await visibleWorkflow(request, id), true) };
    },
  );

  app.delete(
    "/workflows/:id",
    {
      schema: {
        tags,
        summary: "Delete a workflow with its events and the subscriptions naming it (extension)",
        params: idParams,
        querystring: Type.Object(commonParams, { additionalProperties: false }),
        response: { 200: Type.Object({ data: Type.Object({ id: Type.String() }) }), ...errorResponses(404) },
      },
    },
    async (request) => {
      const { id } = request.params as { id: string };
      const workflow = await visibleWorkflow(request, id);
      await store.transaction(async (tx) => {
        await tx.deleteWorkflow(workflow.id);
        await tx.deleteSubscriptionsOf(workflow.id);
      });
      bus.emit("deliveries.withdrawn", { listenerIds: [workflow.id] });
      // Its events go in the pruner's paced batches: no route shows them once the workflow is gone.
      pruner.emptySoon(workflow.id);
      recorder.ids.forget(workflow.id);
      return { data: { id: workflow.id } };
    },
  );

  app.get(
    "/users/me/workflows",
    {
      schema: {
        tags,
        summary: "List the user's workflows, newest first (extension)",
        querystring: listQuerystring(),
        response: {
          200: pageResponse(workflowSchema),
          ...errorResponses(404),
        },
      },
    },
    async (request) => {
      const q = request.query as ListQuery;
      const owner = q.org_id ? actingOwner(request, q.org_id) : principal(request).user.id;
      const pq = pageQuery(q);
      const page = trimPage(await store.listWorkflows([owner], pq), pq);
      return pageEnvelope(page, (w) => renderWorkflow(w, false));
    },
  );

  app.post(
    "/workflows/:id/emits",
    {
      schema: {
        tags,
        summary: "Record an emit of the workflow (extension); it is routed like a source's emits",
        description:
          "Stored with event = {raw_event: <event>}, as the workflow's event_summaries show it; name picks the channel (default when absent).",
        params: idParams,
        body: Type.Object(
          {
            ...commonParams,
            event: Type.Unknown({ description: "The emitted data (any JSON value)" }),
            name: Type.Optional(
              Type.String({
                maxLength: 64,
                pattern: channelPattern.replace("(|", "(|default|"),
                description: "Channel",
              }),
            ),
          },
          { additionalProperties: false },
        ),
        response: { 200: Type.Object({ data: eventEntrySchema }), ...errorResponses(404, 413) },
      },
    },
    async (request) => {
      const { id } = request.params as { id: string };
      const p = params<{ event: unknown; name?: string }>(request);
      const channel = normalizeChannel(p.name, "name");
      if (channel.startsWith("$")) {
        throw invalidParameter(
          "name",
          "Emits go to the default or a custom channel; record errors with POST /v1/workflows/{id}/errors",
        );
      }
      const workflow = await visibleWorkflow(request, id);
      await withinChannelLimit(workflow, channel);
      const stored = await record(workflow, channel, { raw_event: p.event ?? null });
      return { data: renderEvent(stored, true) };
    },
  );

  app.post(
    "/workflows/:id/errors",
    {
      schema: {
        tags,
        summary: "Record an error of the workflow on its $errors stream (extension)",
        description:
          "original_context and error.ts are filled in where left out; workflow_id and owner_id are always the workflow's.",
        params: idParams,
        body: Type.Object(
          {
            ...commonParams,
            original_event: Type.Unknown({ description: "The event the workflow failed on" }),
            original_context: Type.Optional(
              Type.Object(
                {
                  id: Type.Optional(Type.String({ maxLength: 256 })),
                  ts: Type.Optional(Type.String({ maxLength: 64 })),
                  workflow_id: Type.Optional(Type.String({ maxLength: 64 })),
                  deployment_id: Type.Optional(Type.String({ maxLength: 256 })),
                  source_type: Type.Optional(Type.String({ maxLength: 256 })),
                  verified: Type.Optional(Type.Boolean()),
                  owner_id: Type.Optional(Type.String({ maxLength: 64 })),
                  platform_version: Type.Optional(Type.String({ maxLength: 256 })),
                },
                { additionalProperties: true },
              ),
            ),
            error: Type.Object(
              {
                code: Type.String({ minLength: 1, maxLength: 256 }),
                message: Type.Optional(Type.String({ maxLength: 65536 })),
                cellId: Type.Optional(Type.Union([Type.String({ maxLength: 256 }), Type.Null()])),
                stack: Type.Optional(Type.Union([Type.String({ maxLength: 65536 }), Type.Null()])),
                ts: Type.Optional(Type.String({ maxLength: 64 })),
              },
              { additionalProperties: false },
            ),
          },
          { additionalProperties: false },
        ),
        response: { 200: Type.Object({ data: eventEntrySchema }), ...errorResponses(404, 413) },
      },
    },
    async (request) => {
      const { id } = request.params as { id: string };
      const p = params<{
        original_event: unknown;
        original_context?: Record<string, unknown>;
        error: { code: string; message?: string; cellId?: string | null; stack?: string | null; ts?: string };
      }>(request);
      const workflow = await visibleWorkflow(request, id);
      const now = new Date(clock.now()).toISOString();
      const event = {
        original_event: p.original_event ?? null,
        original_context: {
          id: randomString(27),
          ts: now,
          deployment_id: workflow.id,
          source_type: "external",
          verified: false,
          platform_version: platformVersion,
          ...(p.original_context ?? {}),
          workflow_id: workflow.id,
          owner_id: workflow.ownerId,
        },
        error: {
          code: p.error.code,
          ...(p.error.message !== undefined ? { message: p.error.message } : {}),
          cellId: p.error.cellId ?? null,
          ts: p.error.ts ?? now,
          stack: p.error.stack ?? null,
        },
      };
      const stored = await record(workflow, "$errors", event);
      return { data: renderEvent(stored, true) };
    },
  );

  app.get(
    "/workflows/:id/event_summaries",
    {
      schema: {
        tags,
        summary: "The workflow's last emits (up to 100 per channel), newest first",
        description:
          "Each entry's event is {raw_event: <emitted data>}. Data over 1 KB is truncated unless expand=event.",
        params: idParams,
        querystring: eventListQuery,
        response: eventListResponse,
      },
    },
    async (request) => {
      const { id } = request.params as { id: string };
      const workflow = await visibleWorkflow(request, id);
      return listEventsFor(
        app,
        workflow.id,
        request.query as Record<string, string | undefined> & { limit?: number },
      );
    },
  );

  const { event_name: _channel, ...errorListFields } = eventListQuery.properties;
  app.get(
    "/workflows/:id/$errors/event_summaries",
    {
      schema: {
        tags,
        summary: "The workflow's last errors (up to 100), newest first",
        params: idParams,
        querystring: Type.Object(errorListFields, { additionalProperties: false }),
        response: eventListResponse,
      },
    },
    async (request) => {
      const { id } = request.params as { id: string };
      const workflow = await visibleWorkflow(request, id);
      return listEventsFor(app, workflow.id, request.query as { limit?: number }, "$errors");
    },
  );
}
