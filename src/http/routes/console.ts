/**
 * The web console: its page at `GET /`, its built script and stylesheet, and the session endpoints that
 * swap an API key for a console session and its HttpOnly cookie (`/console/session`). The console then
 * calls the same `/v1` API as any client, authenticated by that cookie (see `plugins/session.ts`).
 */
import { randomBytes } from "node:crypto";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { Type } from "typebox";
import type { Principal } from "../../domain/types.ts";
import { endpointSource } from "../../endpoint-origin.ts";
import { AppError } from "../../errors.ts";
import { consoleAssets } from "../console-assets.ts";
import { errorResponses } from "../conventions.ts";
import type { Authenticator } from "../plugins/authentication.ts";
import { consoleHeader } from "../plugins/session.ts";

/**
 * Only the console's own files run on its page; no inline script, nothing from elsewhere. It connects
 * to its own origin, and to the endpoint origin for "Send a test request" (`endpoints`: that origin, or
 * with a host pattern every host of it). Styles may also come from `<style>` elements carrying this
 * page's nonce: the code editor (CodeMirror) writes its styles into one at run time and is given the
 * nonce for it (`EditorView.cspNonce`).
 */
function contentSecurityPolicy(endpoints: string, styleNonce: string): string {
  return (
    `default-src 'self'; script-src 'self'; style-src 'self' 'nonce-${styleNonce}'; img-src 'self' data:; ` +
    `connect-src 'self' ${endpoints}; frame-ancestors 'none'; base-uri 'none'; form-action 'self'`
  );
}

/** Text safe inside a double-quoted HTML attribute. */
function attribute(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

/**
 * The page. The session (or null) rides in a data attribute, so the first view needs no round trip to
 * learn who is signed in; it is data, not script, so the content policy stays strict.
 */
function page(version: string, session: unknown, styleNonce: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="fount-style-nonce" content="${styleNonce}">
<title>Fount</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/console/app.css?v=${version}">
<script type="module" src="/console/app.js?v=${version}"></script>
</head>
<body data-session="${attribute(JSON.stringify(session))}"><div id="app"></div></body>
</html>
`;
}

const sessionSchema = Type.Union([
  Type.Null(),
  Type.Object({
    user: Type.Object({
      id: Type.String(),
      username: Type.String(),
      email: Type.String(),
      is_admin: Type.Boolean(),
    }),
    orgs: Type.Array(Type.Object({ id: Type.String(), orgname: Type.String(), name: Type.String() })),
    expires_at: Type.Optional(Type.Integer()),
  }),
]);

export async function consoleRoutes(
  app: FastifyInstance,
  options: { authenticator: Authenticator },
): Promise<void> {
  const { sessions, store, config } = app.fount;
  const { authenticator } = options;
  const cookies = authenticator.cookies;
  const tags = ["console"];
  const hidden = { hide: true };

  async function render(found: Principal): Promise<Record<string, unknown>> {
    const orgs = await store.listOrgsOfUser(found.user.id);
    return {
      user: {
        id: found.user.id,
        username: found.user.username,
        email: found.user.email,
        is_admin: found.user.isAdmin,
      },
      orgs: orgs.map((o) => ({ id: o.id, orgname: o.orgname, name: o.name })),
    };
  }

  const current = (request: FastifyRequest) => authenticator.session(request);

  function requireConsoleHeader(request: FastifyRequest): void {
    if (request.headers[consoleHeader] !== "1")
      throw new AppError("csrf_rejected", `Send the ${consoleHeader}: 1 header`);
  }

  const noStore = (reply: FastifyReply) => reply.header("cache-control", "no-store");

  app.get("/", { schema: hidden, config: { public: true } }, async (request, reply) => {
    const assets = await consoleAssets();
    const found = await current(request);
    // A new nonce per page (the page is never cached), so that one seen once is no use later.
    const styleNonce = randomBytes(16).toString("base64");
    return (
      reply
        .type("text/html; charset=utf-8")
        .header(
          "content-security-policy",
          contentSecurityPolicy(endpointSource(config.endpointUrl), styleNonce),
        )
        .header("x-content-type-options", "nosniff")
        .header("referrer-policy", "no-referrer")
        // The page holds the user's name: never kept by a cache.
        .header("cache-control", "no-store")
        .send(page(assets.version, found ? await render(found) : null, styleNonce))
    );
  });
  app.get(
    "/console/:file",
    {
      schema: { ...hidden, params: Type.Object({ file: Type.String({ pattern: "^[\\w-]+\\.(js|css)$" }) }) },
      config: { public: true },
    },
    async (request, reply) => {
      const { file } = request.params as { file: string };
      const data = (await consoleAssets()).files.get(file);
      if (!data) throw new AppError("not_found", `No console file ${file}`);
      // The page asks for `?v=<hash of the files>` and chunks carry their hash in their names, so a
      // cached copy is never stale.
      return reply
        .type(file.endsWith(".js") ? "text/javascript; charset=utf-8" : "text/css; charset=utf-8")
        .header("cache-control", "public, max-age=31536000, immutable")
        .header("x-content-type-options", "nosniff")
        .send(data);
    },
  );

  app.get(
    "/console/session",
    {
      config: { public: true },
      schema: {
        // The console's own door, not the API: documented in docs/console.md.
        hide: true,
        tags,
        summary: "The console session of the request's cookie (data is null when signed out)",
        querystring: Type.Object({}, { additionalProperties: false }),
        response: { 200: Type.Object({ data: sessionSchema }) },
      },
    },
    async (request, reply) => {
      noStore(reply);
      const found = await current(request);
      return { data: found ? await render(found) : null };
    },
  );

  app.post(
    "/console/session",
    {
      config: { public: true },
      schema: {
        // The console's own door, not the API: documented in docs/console.md.
        hide: true,
        tags,
        summary: "Sign in to the console: exchange an API key for a session cookie",
        description:
          "Needs the x-fount-console: 1 header. Starts a session of the key's user (12 hours; listed under /v1/users/me/sessions), named by the sealed HttpOnly cookie; no key is stored in the cookie.",
        body: Type.Object(
          { api_key: Type.String({ minLength: 1, maxLength: 512 }) },
          { additionalProperties: false },
        ),
        response: { 200: Type.Object({ data: sessionSchema }), ...errorResponses(403) },
      },
    },
    async (request, reply) => {
      requireConsoleHeader(request);
      const { api_key } = request.body as { api_key: string };
      // The same check as any request's key, throttled alike: sign-in is no way around the throttle.
      const found = await authenticator.key(request, api_key.trim());
      // Signing in again in the same browser ends the session its cookie named.
      const earlier = cookies.read(request);
      if (earlier && (await sessions.end(earlier.userId, earlier.sessionId)))
        app.fount.bus.emit("access.revoked", { userId: earlier.userId });
      const session = await sessions.start(found.user.id, {
        address: request.ip,
        userAgent: request.headers["user-agent"],
      });
      noStore(reply);
      reply.header("set-cookie", cookies.set(session));
      return { data: await render(found) };
    },
  );

  app.delete(
    "/console/session",
    {
      config: { public: true },
      schema: {
        // The console's own door, not the API: documented in docs/console.md.
        hide: true,
        tags,
        summary: "Sign out of the console: end the session and clear the cookie",
        response: {
          200: Type.Object({ data: Type.Object({ signed_out: Type.Boolean() }) }),
          ...errorResponses(403),
        },
      },
    },
    async (request, reply) => {
      requireConsoleHeader(request);
      const token = cookies.read(request);
      const ended = token ? await sessions.end(token.userId, token.sessionId) : false;
      if (ended && token) app.fount.bus.emit("access.revoked", { userId: token.userId });
      noStore(reply);
      reply.header("set-cookie", cookies.clear());
      return { data: { signed_out: ended } };
    },
  );
}
