/** App accounts (`apn_…`): credentials that become an app prop's `$auth`, sealed at rest. */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { Type } from "typebox";
import type { AppAccount } from "../../domain/types.ts";
import { AppError } from "../../errors.ts";
import { newId } from "../../ids.ts";
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
  trimPage,
  visibleOr404,
  visibleOwners,
} from "../conventions.ts";
import { refuseOverLimit } from "../owner-limits.ts";

const accountSchema = Type.Object(
  {
    id: Type.String(),
    app: Type.Object({ name_slug: Type.String() }),
    name: Type.String(),
    healthy: Type.Boolean(),
    created_at: Type.Integer(),
    updated_at: Type.Integer(),
    credentials: Type.Optional(Type.Object({}, { additionalProperties: true })),
  },
  { description: "App account" },
);

const idParams = Type.Object({ id: Type.String({ pattern: "^apn_[A-Za-z0-9]+$", maxLength: 64 }) });

export async function accountRoutes(app: FastifyInstance): Promise<void> {
  const tags = ["accounts"];
  const { store, secrets, clock } = app.fount;

  const render = (a: AppAccount, credentials?: boolean): Record<string, unknown> => ({
    id: a.id,
    app: { name_slug: a.app },
    name: a.name,
    healthy: true,
    created_at: a.createdAt,
    updated_at: a.updatedAt,
    ...(credentials ? { credentials: JSON.parse(secrets.open(a.credentialsSealed)) } : {}),
  });

  async function visibleAccount(request: FastifyRequest, id: string): Promise<AppAccount> {
    return visibleOr404(request, await store.getAppAccount(id), "App account", id);
  }

  app.post(
    "/accounts",
    {
      schema: {
        tags,
        summary: "Connect an app account (extension): its credentials become $auth",
        body: Type.Object(
          {
            ...commonParams,
            app: Type.String({ minLength: 1, maxLength: 64, pattern: "^[a-z0-9][a-z0-9_-]*$" }),
            name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
            credentials: Type.Object({}, { additionalProperties: true }),
          },
          { additionalProperties: false },
        ),
        response: { 200: Type.Object({ data: Type.Partial(accountSchema) }), ...errorResponses(404, 409) },
      },
    },
    async (request) => {
      const p = params<{ app: string; name?: string; credentials: Record<string, unknown>; org_id?: string }>(
        request,
      );
      const json = JSON.stringify(p.credentials);
      if (json.length > 64 * 1024)
        throw new AppError("invalid_parameter", "credentials are over 64 KB", {
          details: { field: "credentials" },
        });
      const ownerId = actingOwner(request, p.org_id);
      const owned = await store.listAppAccounts([ownerId], { limit: 1 });
      refuseOverLimit(app.fount.config.ownerLimits, "appAccounts", owned.totalCount);
      const now = Math.floor(clock.now() / 1000);
      const account: AppAccount = {
        id: newId("apn"),
        ownerId,
        app: p.app,
        name: p.name ?? p.app,
        credentialsSealed: secrets.seal(json),
        createdAt: now,
        updatedAt: now,
      };
      await store.insertAppAccount(account);
      return { data: render(account) };
    },
  );

  app.get(
    "/accounts",
    {
      schema: {
        tags,
        summary: "List app accounts",
        querystring: listQuerystring(),
        response: {
          200: pageResponse(accountSchema),
          ...errorResponses(404),
        },
      },
    },
    async (request) => {
      const q = request.query as ListQuery;
      const owners = q.org_id ? [actingOwner(request, q.org_id)] : visibleOwners(request);
      const pq = pageQuery(q);
      return pageEnvelope(trimPage(await store.listAppAccounts(owners, pq), pq), (a) => render(a));
    },
  );

  app.get(
    "/accounts/:id",
    {
      schema: {
        tags,
        summary: "Get an app account; include_credentials=true shows the credentials",
        params: idParams,
        querystring: Type.Object(
          { ...commonParams, include_credentials: Type.Optional(Type.Boolean()) },
          { additionalProperties: false },
        ),
        response: { 200: Type.Object({ data: Type.Partial(accountSchema) }), ...errorResponses(404) },
      },
    },
    async (request) => {
      const { id } = request.params as { id: string };
      const { include_credentials } = request.query as { include_credentials?: boolean };
      return { data: render(await visibleAccount(request, id), include_credentials === true) };
    },
  );

  app.delete(
    "/accounts/:id",
    {
      schema: {
        tags,
        summary: "Delete an app account",
        params: idParams,
        querystring: Type.Object(commonParams, { additionalProperties: false }),
        response: { 200: Type.Object({ data: Type.Object({ id: Type.String() }) }), ...errorResponses(404) },
      },
    },
    async (request) => {
      const { id } = request.params as { id: string };
      await visibleAccount(request, id);
      await store.deleteAppAccount(id);
      return { data: { id } };
    },
  );
}
