/**
 * Console sessions as the API shows them (docs/console.md, "Sessions"): a user lists and ends their own
 * under `/users/me/sessions`, an admin any user's under `/admin/users/{id}/sessions`. Ending one signs
 * out the browser that holds it on its next request, on every node.
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { Type } from "typebox";
import type { SessionRecord } from "../../domain/types.ts";
import { notFound } from "../../errors.ts";
import { commonParams, errorResponses, principal } from "../conventions.ts";
import { requireAdmin } from "./admin.ts";

const sessionSchema = Type.Object(
  {
    id: Type.String(),
    user_id: Type.String(),
    created_at: Type.Integer(),
    expires_at: Type.Integer(),
    address: Type.Union([Type.String(), Type.Null()], { description: "Client address at sign-in" }),
    user_agent: Type.Union([Type.String(), Type.Null()], { description: "User-Agent at sign-in" }),
    current: Type.Boolean({ description: "The session this request was made with" }),
  },
  { description: "Console session" },
);

const filterQuery = Type.Object(
  { include: commonParams.include, exclude: commonParams.exclude },
  { additionalProperties: false },
);
const sessionId = Type.String({ pattern: "^ses_[A-Za-z0-9]+$", maxLength: 64 });
const userId = Type.String({ pattern: "^u_[A-Za-z0-9]+$", maxLength: 64 });
// Partial: `include`/`exclude` may drop any field.
const listResponse = Type.Object({ data: Type.Array(Type.Partial(sessionSchema)) });
const revokedResponse = Type.Object({
  data: Type.Partial(Type.Object({ id: Type.String(), revoked: Type.Boolean() })),
});

function render(request: FastifyRequest, s: SessionRecord): Record<string, unknown> {
  const { credential } = principal(request);
  return {
    id: s.id,
    user_id: s.userId,
    created_at: s.createdAt,
    expires_at: s.expiresAt,
    address: s.address,
    user_agent: s.userAgent,
    current: credential.kind === "session" && credential.id === s.id,
  };
}

export async function sessionRoutes(app: FastifyInstance): Promise<void> {
  const { sessions, store } = app.fount;

  app.get(
    "/users/me/sessions",
    {
      schema: {
        tags: ["users"],
        summary: "List your console sessions, newest first",
        querystring: filterQuery,
        response: { 200: listResponse, ...errorResponses() },
      },
    },
    async (request) => {
      const list = await sessions.list(principal(request).user.id);
      return { data: list.map((s) => render(request, s)) };
    },
  );

  app.delete(
    "/users/me/sessions/:session_id",
    {
      schema: {
        tags: ["users"],
        summary: "End one of your console sessions (its browser is signed out)",
        params: Type.Object({ session_id: sessionId }),
        querystring: filterQuery,
        response: { 200: revokedResponse, ...errorResponses(404) },
      },
    },
    async (request) => {
      const { session_id } = request.params as { session_id: string };
      await sessions.revoke(principal(request).user.id, session_id);
      app.fount.bus.emit("access.revoked", { userId: principal(request).user.id });
      return { data: { id: session_id, revoked: true } };
    },
  );

  app.get(
    "/admin/users/:user_id/sessions",
    {
      onRequest: async (request) => requireAdmin(request),
      schema: {
        tags: ["admin"],
        summary: "List a user's console sessions, newest first",
        params: Type.Object({ user_id: userId }),
        querystring: filterQuery,
        response: { 200: listResponse, ...errorResponses(403, 404) },
      },
    },
    async (request) => {
      const { user_id } = request.params as { user_id: string };
      if (!(await store.getUser(user_id))) throw notFound("User", user_id);
      const list = await sessions.list(user_id);
      return { data: list.map((s) => render(request, s)) };
    },
  );

  app.delete(
    "/admin/users/:user_id/sessions/:session_id",
    {
      onRequest: async (request) => requireAdmin(request),
      schema: {
        tags: ["admin"],
        summary: "End a user's console session (its browser is signed out)",
        params: Type.Object({ user_id: userId, session_id: sessionId }),
        querystring: filterQuery,
        response: { 200: revokedResponse, ...errorResponses(403, 404) },
      },
    },
    async (request) => {
      const { user_id, session_id } = request.params as { user_id: string; session_id: string };
      await sessions.revoke(user_id, session_id);
      app.fount.bus.emit("access.revoked", { userId: user_id });
      return { data: { id: session_id, revoked: true } };
    },
  );
}
