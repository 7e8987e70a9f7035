/** The admin API (admin keys only): users, organizations, memberships, API keys and registry publishing. */
import { performance } from "node:perf_hooks";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { type TObject, type TProperties, Type } from "typebox";
import { type NodeView, nodeViews } from "../../domain/cluster/source-leases.ts";
import { publishToRegistry } from "../../domain/components/registry.ts";
import type { Page, PageQuery, WithSeq } from "../../domain/types.ts";
import { AppError } from "../../errors.ts";
import { renderOrg, renderUser } from "../admin-views.ts";
import {
  commonParams,
  errorResponses,
  type ListQuery,
  pageEnvelope,
  pageParams,
  pageQuery,
  pageResponse,
  params,
  principal,
  trimPage,
} from "../conventions.ts";
import { renderComponent } from "./components.ts";

/** Refuses (403) a caller that is not an admin. */
export function requireAdmin(request: FastifyRequest): void {
  if (!principal(request).user.isAdmin)
    throw new AppError("forbidden", "Only admin keys may use the admin API");
}

const userSchema = Type.Object({
  id: Type.String(),
  username: Type.String(),
  email: Type.String(),
  plan: Type.Union([Type.Literal("free"), Type.Literal("paid")]),
  is_admin: Type.Boolean(),
  created_at: Type.Integer(),
});
const orgSchema = Type.Object({
  id: Type.String(),
  orgname: Type.String(),
  name: Type.String(),
  email: Type.String(),
  owner_id: Type.String(),
  created_at: Type.Integer(),
});
/** The query of the admin lists: a page and `include`/`exclude` (no `org_id`: they list every tenant). */
const adminListQuery = Type.Object(
  { include: commonParams.include, exclude: commonParams.exclude, ...pageParams },
  { additionalProperties: false },
);

const keySchema = Type.Object({
  id: Type.String(),
  user_id: Type.String(),
  name: Type.String(),
  prefix: Type.String(),
  created_at: Type.Integer(),
});
const anyData = Type.Object({ data: Type.Object({}, { additionalProperties: true }) });
const idPath = (name: string, prefix: string) =>
  Type.Object({ [name]: Type.String({ pattern: `^${prefix}_[A-Za-z0-9]+$`, maxLength: 64 }) });

export async function adminRoutes(app: FastifyInstance): Promise<void> {
  // Before the body is read or validated: a non-admin learns nothing about the admin API but 403.
  app.addHook("onRequest", async (request) => requireAdmin(request));
  const tags = ["admin"];
  const { accounts } = app.fount;

  app.post(
    "/admin/users",
    {
      schema: {
        tags,
        summary: "Create a user and its first API key",
        body: Type.Object(
          {
            include: commonParams.include,
            exclude: commonParams.exclude,
            username: Type.String({ minLength: 1, maxLength: 64 }),
            email: Type.String({ format: "email", maxLength: 320 }),
            plan: Type.Optional(Type.Union([Type.Literal("free"), Type.Literal("paid")])),
            is_admin: Type.Optional(Type.Boolean()),
          },
          { additionalProperties: false },
        ),
        response: { 200: anyData, ...errorResponses(403, 409) },
      },
    },
    async (request) => {
      const p = params<{ username: string; email: string; plan?: "free" | "paid"; is_admin?: boolean }>(
        request,
      );
      const { user, apiKey } = await accounts.createUser({
        username: p.username,
        email: p.email,
        plan: p.plan,
        isAdmin: p.is_admin,
      });
      return { data: { ...renderUser(user), api_key: apiKey.secret, api_key_id: apiKey.key.id } };
    },
  );

  // Every user and every organization, a page at a time, for picking one by name (the console's admin page).
  function listRoute<T, I extends TProperties>(
    path: string,
    what: string,
    item: TObject<I>,
    list: (page: PageQuery) => Promise<Page<WithSeq<T>>>,
    render: (record: T) => Record<string, unknown>,
  ): void {
    app.get(
      path,
      {
        schema: {
          tags,
          summary: `List every ${what} (newest first)`,
          querystring: adminListQuery,
          response: { 200: pageResponse(item), ...errorResponses(403) },
        },
      },
      async (request) => {
        const pq = pageQuery(request.query as ListQuery);
        return pageEnvelope(trimPage(await list(pq), pq), render);
      },
    );
  }
  listRoute("/admin/users", "user", userSchema, (pq) => app.fount.store.listUsers(pq), renderUser);
  listRoute("/admin/orgs", "organization", orgSchema, (pq) => app.fount.store.listOrgs(pq), renderOrg);

  app.post(
    "/admin/orgs",
    {
      schema: {
        tags,
        summary: "Create an organization",
        body: Type.Object(
          {
            include: commonParams.include,
            exclude: commonParams.exclude,
            orgname: Type.String({ minLength: 1, maxLength: 64 }),
            name: Type.Optional(Type.String({ minLength: 1, maxLength: 256 })),
            email: Type.Optional(Type.String({ format: "email", maxLength: 320 })),
            owner_id: Type.String({ pattern: "^u_[A-Za-z0-9]+$", maxLength: 64 }),
          },
          { additionalProperties: false },
        ),
        response: { 200: anyData, ...errorResponses(403, 409) },
      },
    },
    async (request) => {
      const p = params<{ orgname: string; name?: string; email?: string; owner_id: string }>(request);
      const org = await accounts.createOrg({
        orgname: p.orgname,
        name: p.name,
        email: p.email,
        ownerId: p.owner_id,
      });
      return { data: renderOrg(org) };
    },
  );

  const memberBody = Type.Object(
    {
      include: commonParams.include,
      exclude: commonParams.exclude,
      user_id: Type.String({ pattern: "^u_[A-Za-z0-9]+$", maxLength: 64 }),
    },
    { additionalProperties: false },
  );
  app.post(
    "/admin/orgs/:org_id/members",
    {
      schema: {
        tags,
        summary: "Add a member to an organization",
        params: idPath("org_id", "o"),
        body: memberBody,
        response: { 200: anyData, ...errorResponses(403, 404) },
      },
    },
    async (request) => {
      const { org_id } = request.params as { org_id: string };
      const { user_id } = params<{ user_id: string }>(request);
      await accounts.addMember(org_id, user_id);
      return { data: { org_id, user_id, role: "member" } };
    },
  );
  app.delete(
    "/admin/orgs/:org_id/members",
    {
      schema: {
        tags,
        summary: "Remove a member from an organization",
        params: idPath("org_id", "o"),
        querystring: memberBody,
        response: { 200: anyData, ...errorResponses(403, 404, 409) },
      },
    },
    async (request) => {
      const { org_id } = request.params as { org_id: string };
      const { user_id } = request.query as { user_id: string };
      await accounts.removeMember(org_id, user_id);
      app.fount.bus.emit("access.revoked", { userId: user_id });
      app.fount.bus.emit("deliveries.withdrawn", { ownerIds: [user_id, org_id] });
      return { data: { org_id, user_id } };
    },
  );

  app.post(
    "/admin/registry",
    {
      schema: {
        tags,
        summary: "Publish a component to the registry",
        description:
          "The code needs a `key` and a semantic `version` (422 otherwise). The same code under the same key again is a no-op (`created: false`); changed code is a new version that `key` lookups then find.",
        body: Type.Object(
          {
            include: commonParams.include,
            exclude: commonParams.exclude,
            component_code: Type.String({ minLength: 1, maxLength: 1024 * 1024 }),
            component_url: Type.Optional(
              Type.String({ minLength: 1, maxLength: 2048, description: "Kept as metadata" }),
            ),
          },
          { additionalProperties: false },
        ),
        response: { 200: anyData, ...errorResponses(403, 413, 422) },
      },
    },
    async (request) => {
      const p = params<{ component_code: string; component_url?: string }>(request);
      const { component, created } = await publishToRegistry(app.fount, p.component_code, {
        url: p.component_url,
      });
      return { data: { ...renderComponent(component), created } };
    },
  );

  app.post(
    "/admin/users/:user_id/keys",
    {
      schema: {
        tags,
        summary: "Create another API key for a user (shown once)",
        params: idPath("user_id", "u"),
        body: Type.Object(
          {
            include: commonParams.include,
            exclude: commonParams.exclude,
            name: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
          },
          { additionalProperties: false },
        ),
        response: { 200: anyData, ...errorResponses(403, 404) },
      },
    },
    async (request) => {
      const { user_id } = request.params as { user_id: string };
      const { name } = params<{ name?: string }>(request);
      const issued = await accounts.createApiKey(user_id, name);
      return {
        data: {
          id: issued.key.id,
          user_id: issued.key.userId,
          name: issued.key.name,
          prefix: issued.key.prefix,
          created_at: issued.key.createdAt,
          api_key: issued.secret,
        },
      };
    },
  );
  app.get(
    "/admin/users/:user_id/keys",
    {
      schema: {
        tags,
        summary: "List a user's API keys (never their secrets)",
        params: idPath("user_id", "u"),
        querystring: Type.Object(
          { include: commonParams.include, exclude: commonParams.exclude },
          { additionalProperties: false },
        ),
        response: {
          // Partial: `include`/`exclude` may drop any field (a required one made the serializer throw).
          200: Type.Object({
            data: Type.Array(
              Type.Partial(
                Type.Object({
                  ...keySchema.properties,
                  revoked_at: Type.Union([Type.Integer(), Type.Null()]),
                }),
              ),
            ),
          }),
          ...errorResponses(403, 404),
        },
      },
    },
    async (request) => {
      const { user_id } = request.params as { user_id: string };
      if (!(await app.fount.store.getUser(user_id)))
        throw new AppError("not_found", `User ${user_id} not found`);
      const keys = await app.fount.store.listApiKeys(user_id);
      return {
        data: keys.map((k) => ({
          id: k.id,
          user_id: k.userId,
          name: k.name,
          prefix: k.prefix,
          created_at: k.createdAt,
          revoked_at: k.revokedAt,
        })),
      };
    },
  );
  app.get(
    "/admin/nodes",
    {
      schema: {
        tags,
        summary: "List the nodes serving this store: live or dead, their address, the sources each runs",
        description:
          "With several nodes on one PostgreSQL store, every node process (its `FOUNT_NODE_ID` and a " +
          "suffix of its own): `live` while its heartbeat is at most 5 s old, `dead` for a day after it " +
          "was killed (one that stops cleanly leaves), the address the others send it hits at, and how " +
          "many sources it runs. `self` marks the node that answered. On SQLite, the one node answering, " +
          "with `url` and `sources` null (it runs every source).",
        querystring: Type.Object({}, { additionalProperties: false }),
        response: {
          200: Type.Object({
            data: Type.Array(
              Type.Object({
                id: Type.String(),
                state: Type.Union([Type.Literal("live"), Type.Literal("dead")]),
                url: Type.Union([Type.String(), Type.Null()]),
                started_at: Type.Integer(),
                heartbeat_at: Type.Integer(),
                heartbeat_age_ms: Type.Integer(),
                sources: Type.Union([Type.Integer(), Type.Null()]),
                self: Type.Boolean(),
              }),
            ),
          }),
          ...errorResponses(403),
        },
      },
    },
    async () => {
      const { store, memberId, config, clock } = app.fount;
      if (store.cluster && memberId !== undefined) {
        const views: Array<NodeView & { self: boolean }> = (await nodeViews(store.cluster)).map((n) => ({
          ...n,
          self: n.id === memberId,
        }));
        return { data: views };
      }
      const now = clock.now();
      return {
        data: [
          {
            id: config.nodeId,
            state: "live",
            url: null,
            started_at: Math.floor(performance.timeOrigin / 1000),
            heartbeat_at: Math.floor(now / 1000),
            heartbeat_age_ms: 0,
            sources: null,
            self: true,
          },
        ],
      };
    },
  );
  app.delete(
    "/admin/keys/:key_id",
    {
      schema: {
        tags,
        summary: "Revoke an API key",
        params: idPath("key_id", "key"),
        querystring: Type.Object(
          { include: commonParams.include, exclude: commonParams.exclude },
          { additionalProperties: false },
        ),
        response: { 200: anyData, ...errorResponses(403, 404) },
      },
    },
    async (request) => {
      const { key_id } = request.params as { key_id: string };
      await accounts.revokeApiKey(key_id);
      // Whose key it was is not read back: an admin's revocation checks every stream on this node.
      app.fount.bus.emit("access.revoked", {});
      return { data: { id: key_id, revoked: true } };
    },
  );
}
