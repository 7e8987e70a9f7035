import { randomBytes } from "node:crypto";
/** Webhooks: account-level HTTP(S) destinations with a signing secret shown once. */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { Type } from "typebox";
import type { Webhook } from "../../domain/types.ts";
import { invalidParameter, notFound } from "../../errors.ts";
import { newId } from "../../ids.ts";
import {
  actingOwner,
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
  visibleOr404,
} from "../conventions.ts";

const webhookSchema = Type.Object(
  {
    id: Type.String(),
    user_id: Type.Optional(Type.String()),
    name: Type.Union([Type.String(), Type.Null()]),
    description: Type.Union([Type.String(), Type.Null()]),
    url: Type.String(),
    active: Type.Boolean(),
    created_at: Type.Integer(),
    updated_at: Type.Integer(),
    signing_secret: Type.Optional(Type.String()),
  },
  { description: "Webhook" },
);

const fields = {
  name: Type.Optional(Type.Union([Type.String({ maxLength: 256 }), Type.Null()])),
  description: Type.Optional(Type.Union([Type.String({ maxLength: 4096 }), Type.Null()])),
};

/**
 * The spec's rule: http or https, a hostname, optionally a port and a path. The URL is kept as the client
 * wrote it (not re-serialised), so what is read back is what was sent.
 */
export function validateWebhookUrl(raw: string): string {
  const message = "url must be an absolute http or https URL with a hostname";
  // WHATWG parsing forgives a lot (`http:host`, surrounding spaces, backslashes); the spec does not.
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):(?!\d)/.exec(raw)?.[1]?.toLowerCase();
  if (scheme !== undefined && scheme !== "http" && scheme !== "https") {
    throw invalidParameter("url", `url must use http or https, not ${scheme}`);
  }
  if (!/^https?:\/\/[^/?#\\\s]/i.test(raw) || /[\s\\]/.test(raw)) throw invalidParameter("url", message);
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw invalidParameter("url", message);
  }
  if (!url.hostname) throw invalidParameter("url", "url must contain a hostname");
  return raw;
}

export function renderWebhook(w: Webhook, withUser: boolean): Record<string, unknown> {
  return {
    id: w.id,
    ...(withUser ? { user_id: w.ownerId } : {}),
    name: w.name,
    description: w.description,
    url: w.url,
    active: w.active,
    created_at: w.createdAt,
    updated_at: w.updatedAt,
  };
}

const idParams = Type.Object({ id: Type.String({ pattern: "^wh_[A-Za-z0-9]+$", maxLength: 64 }) });

/** The webhook `id` if the caller may see it; otherwise 404. */
export async function visibleWebhook(
  app: FastifyInstance,
  request: FastifyRequest,
  id: string,
): Promise<Webhook> {
  return visibleOr404(request, await app.fount.store.getWebhook(id), "Webhook", id);
}

export async function webhookRoutes(app: FastifyInstance): Promise<void> {
  const { store, secrets, clock } = app.fount;
  const tags = ["webhooks"];

  app.post(
    "/webhooks",
    {
      schema: {
        tags,
        summary: "Create a webhook",
        description:
          "Parameters may be sent in the query string or the JSON body. The signing secret is returned only here.",
        body: Type.Object(
          { ...commonParams, url: Type.String({ minLength: 1, maxLength: 2048 }), ...fields },
          { additionalProperties: false },
        ),
        response: { 200: Type.Object({ data: Type.Partial(webhookSchema) }), ...errorResponses(404) },
      },
    },
    async (request) => {
      const p = params<{ url: string; name?: string | null; description?: string | null; org_id?: string }>(
        request,
      );
      const url = validateWebhookUrl(p.url);
      const ownerId = actingOwner(request, p.org_id);
      const now = Math.floor(clock.now() / 1000);
      // Standard Webhooks secrets: `whsec_` and base64 of random bytes (24 bytes = 192 bits).
      const signingSecret = `whsec_${randomBytes(24).toString("base64")}`;
      const webhook: Webhook = {
        id: newId("wh"),
        ownerId,
        createdBy: principal(request).user.id,
        name: p.name ?? null,
        description: p.description ?? null,
        url,
        active: true,
        signingSecretSealed: secrets.seal(signingSecret),
        createdAt: now,
        updatedAt: now,
      };
      await store.insertWebhook(webhook);
      return { data: { ...renderWebhook(webhook, true), signing_secret: signingSecret } };
    },
  );

  app.get(
    "/users/me/webhooks",
    {
      schema: {
        tags,
        summary: "List webhooks (newest first)",
        querystring: listQuerystring(),
        response: {
          200: pageResponse(webhookSchema),
          ...errorResponses(404),
        },
      },
    },
    async (request) => {
      const q = request.query as ListQuery;
      const owner = q.org_id ? [actingOwner(request, q.org_id)] : [principal(request).user.id];
      const pq = pageQuery(q);
      const page = trimPage(await store.listWebhooks(owner, pq), pq);
      return pageEnvelope(page, (w) => renderWebhook(w, false));
    },
  );

  app.get(
    "/webhooks/:id",
    {
      schema: {
        tags,
        summary: "Get a webhook",
        params: idParams,
        querystring: Type.Object(commonParams, { additionalProperties: false }),
        response: { 200: Type.Object({ data: Type.Partial(webhookSchema) }), ...errorResponses(404) },
      },
    },
    async (request) => {
      const { id } = request.params as { id: string };
      return { data: renderWebhook(await visibleWebhook(app, request, id), true) };
    },
  );

  app.put(
    "/webhooks/:id",
    {
      schema: {
        tags,
        summary: "Update a webhook (active, name, description, url)",
        params: idParams,
        body: Type.Object(
          {
            ...commonParams,
            url: Type.Optional(Type.String({ minLength: 1, maxLength: 2048 })),
            active: Type.Optional(Type.Boolean()),
            ...fields,
          },
          { additionalProperties: false },
        ),
        response: { 200: Type.Object({ data: Type.Partial(webhookSchema) }), ...errorResponses(404) },
      },
    },
    async (request) => {
      const { id } = request.params as { id: string };
      const p = params<{ url?: string; active?: boolean; name?: string | null; description?: string | null }>(
        request,
      );
      await visibleWebhook(app, request, id);
      const updated = await store.updateWebhook(id, {
        url: p.url === undefined ? undefined : validateWebhookUrl(p.url),
        active: p.active,
        name: p.name,
        description: p.description,
        updatedAt: Math.floor(clock.now() / 1000),
      });
      if (!updated) throw notFound("Webhook", id);
      // Its parked deliveries are due now: send them without waiting for the dispatcher's next poll.
      if (p.active) app.fount.dispatcher.wake();
      return { data: renderWebhook(updated, true) };
    },
  );

  app.delete(
    "/webhooks/:id",
    {
      schema: {
        tags,
        summary: "Delete a webhook and the subscriptions that deliver to it",
        params: idParams,
        querystring: Type.Object(commonParams, { additionalProperties: false }),
        response: { 200: Type.Object({ data: Type.Object({ id: Type.String() }) }), ...errorResponses(404) },
      },
    },
    async (request) => {
      const { id } = request.params as { id: string };
      await visibleWebhook(app, request, id);
      await store.transaction(async (tx) => {
        await tx.deleteWebhook(id);
        await tx.deleteSubscriptionsOf(id);
      });
      return { data: { id } };
    },
  );

  // Listing also answers for organizations, as the sources and subscriptions lists do.
  app.get(
    "/orgs/:org_id/webhooks",
    {
      schema: {
        tags,
        summary: "List an organization's webhooks",
        params: Type.Object({ org_id: Type.String({ pattern: "^o_[A-Za-z0-9]+$", maxLength: 64 }) }),
        querystring: Type.Object(
          { include: commonParams.include, exclude: commonParams.exclude, ...pageParams },
          { additionalProperties: false },
        ),
        response: {
          200: pageResponse(webhookSchema),
          ...errorResponses(404),
        },
      },
    },
    async (request) => {
      const { org_id } = request.params as { org_id: string };
      const owner = actingOwner(request, org_id);
      const pq = pageQuery(request.query as ListQuery);
      const page = trimPage(await store.listWebhooks([owner], pq), pq);
      return pageEnvelope(page, (w) => renderWebhook(w, false));
    },
  );
}
