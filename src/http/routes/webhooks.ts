/**
 * Webhooks: account-level HTTP(S) destinations with a signing secret shown once. An admin may allow one
 * to reach loopback and private addresses (`allow_private`), and creating or changing one whose URL the
 * delivery guard will refuse answers with a warning.
 */
import { randomBytes } from "node:crypto";
import { isIP } from "node:net";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { Type } from "typebox";
import { AddressPolicy } from "../../delivery/address-guard.ts";
import type { Webhook } from "../../domain/types.ts";
import { AppError, invalidParameter, notFound } from "../../errors.ts";
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
import { refuseOverLimit } from "../owner-limits.ts";

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
    allow_private: Type.Optional(
      Type.Boolean({ description: "Set by an admin: deliveries may reach loopback and private addresses" }),
    ),
  },
  { description: "Webhook" },
);

const warningsSchema = Type.Optional(
  Type.Array(Type.Object({ code: Type.String(), message: Type.String() }), {
    description: "Present when the webhook was saved but something about it needs attention",
  }),
);

/** A note in a create or update answer: the webhook was saved, but will not work as it stands. */
export interface WebhookWarning {
  code: "destination_refused";
  message: string;
}

/**
 * Whether deliveries to `raw` will be refused by the delivery guard, told when the webhook is saved
 * rather than at its first delivery. Decided without DNS: an IP literal, or `localhost` and its
 * subdomains (always loopback, RFC 6761); other names are checked at each connection, since what
 * they resolve to may change. A warning rather than a 4xx: the URL is valid, Pipedream accepts it,
 * and the operator may allow it later.
 */
export function destinationWarnings(
  policy: AddressPolicy,
  raw: string,
  allowPrivate: boolean,
): WebhookWarning[] {
  if (allowPrivate) return [];
  const host = new URL(raw).hostname
    .replace(/^\[|\]$/g, "")
    .toLowerCase()
    .replace(/\.$/, "");
  const address =
    isIP(host) !== 0 ? host : host === "localhost" || host.endsWith(".localhost") ? "127.0.0.1" : undefined;
  if (address === undefined || policy.allowsAddress(host, address)) return [];
  return [
    {
      code: "destination_refused",
      message:
        `Deliveries to ${host} will be refused: loopback, private and link-local addresses are not allowed as ` +
        "delivery destinations. An admin may allow this webhook (allow_private: true), or the operator the " +
        "address (FOUNT_WEBHOOK_ALLOW_HOSTS, FOUNT_WEBHOOK_ALLOW_PRIVATE).",
    },
  ];
}

/** Only an admin grants a webhook private addresses: a tenant must not reach the operator's network. */
function requireAdminFor(request: FastifyRequest, what: string): void {
  if (!principal(request).user.isAdmin) throw new AppError("forbidden", `Only an admin may ${what}`);
}

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
    allow_private: w.allowPrivate,
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
  const { store, secrets, clock, config } = app.fount;
  const tags = ["webhooks"];
  const policy = new AddressPolicy({
    allowPrivate: config.webhookAllowPrivate,
    allowHosts: config.webhookAllowHosts,
  });

  app.post(
    "/webhooks",
    {
      schema: {
        tags,
        summary: "Create a webhook",
        description:
          "Parameters may be sent in the query string or the JSON body. The signing secret is returned only here. " +
          "allow_private (admins only, else 403) lets deliveries reach loopback and private addresses; " +
          "`warnings` says when deliveries to the URL will be refused.",
        body: Type.Object(
          {
            ...commonParams,
            url: Type.String({ minLength: 1, maxLength: 2048 }),
            ...fields,
            allow_private: Type.Optional(Type.Boolean()),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({ data: Type.Partial(webhookSchema), warnings: warningsSchema }),
          ...errorResponses(403, 404, 409),
        },
      },
    },
    async (request) => {
      const p = params<{
        url: string;
        name?: string | null;
        description?: string | null;
        org_id?: string;
        allow_private?: boolean;
      }>(request);
      const url = validateWebhookUrl(p.url);
      const allowPrivate = p.allow_private === true;
      if (allowPrivate) requireAdminFor(request, "allow a webhook to reach private addresses");
      const ownerId = actingOwner(request, p.org_id);
      const owned = await store.listWebhooks([ownerId], { limit: 1 });
      refuseOverLimit(config.ownerLimits, "webhooks", owned.totalCount);
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
        allowPrivate,
        createdAt: now,
        updatedAt: now,
      };
      await store.insertWebhook(webhook);
      const warnings = destinationWarnings(policy, url, allowPrivate);
      return {
        data: { ...renderWebhook(webhook, true), signing_secret: signingSecret },
        ...(warnings.length > 0 ? { warnings } : {}),
      };
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
        summary: "Update a webhook (active, name, description, url, allow_private)",
        description:
          "allow_private: true is for admins only (else 403); so is a new url for a webhook that has it. " +
          "`warnings` says when deliveries to the URL will be refused.",
        params: idParams,
        body: Type.Object(
          {
            ...commonParams,
            url: Type.Optional(Type.String({ minLength: 1, maxLength: 2048 })),
            active: Type.Optional(Type.Boolean()),
            ...fields,
            allow_private: Type.Optional(Type.Boolean()),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({ data: Type.Partial(webhookSchema), warnings: warningsSchema }),
          ...errorResponses(403, 404),
        },
      },
    },
    async (request) => {
      const { id } = request.params as { id: string };
      const p = params<{
        url?: string;
        active?: boolean;
        name?: string | null;
        description?: string | null;
        allow_private?: boolean;
      }>(request);
      const current = await visibleWebhook(app, request, id);
      const url = p.url === undefined ? undefined : validateWebhookUrl(p.url);
      if (p.allow_private === true) requireAdminFor(request, "allow a webhook to reach private addresses");
      // Otherwise an organization's member could point an admin's allowance anywhere in the network.
      const moved = url !== undefined && url !== current.url;
      if (moved && current.allowPrivate && p.allow_private !== false)
        requireAdminFor(request, "change the url of a webhook allowed to reach private addresses");
      // A member's new url also clears the allowance: an admin's grant committed since `current` was
      // read would otherwise reach the member's url.
      const cleared = moved && !principal(request).user.isAdmin ? false : undefined;
      const updated = await store.updateWebhook(id, {
        url,
        active: p.active,
        name: p.name,
        description: p.description,
        allowPrivate: p.allow_private ?? cleared,
        updatedAt: Math.floor(clock.now() / 1000),
      });
      if (!updated) throw notFound("Webhook", id);
      // Its parked deliveries are due now, in batches, each sent without waiting for the next poll; made
      // inactive, its due ones are parked in batches.
      if (p.active) app.fount.dispatcher.unparkSoon();
      else if (p.active === false) app.fount.dispatcher.parkSoon(id);
      const warnings =
        url === undefined && p.allow_private === undefined
          ? []
          : destinationWarnings(policy, updated.url, updated.allowPrivate);
      return { data: renderWebhook(updated, true), ...(warnings.length > 0 ? { warnings } : {}) };
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
      app.fount.bus.emit("deliveries.withdrawn", { listenerIds: [id] });
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
