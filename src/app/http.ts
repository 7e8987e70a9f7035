/**
 * The app's HTTP side, registered in the order Fastify runs it: request rules and body parsing, the
 * 404/405 handler, the hooks of every request (request ID, 503 while closing, authentication), then the
 * plugins and routes — docs, metrics, health, the `/v1` API behind its rate limit, the source endpoints
 * (answered before Fastify, front-door.ts), the live stream and the console.
 */
import rateLimit from "@fastify/rate-limit";
import type { Clock } from "../clock.ts";
import type { Config } from "../config.ts";
import type { SecretBox } from "../crypto/secret-box.ts";
import { ForwardedHits } from "../domain/cluster/forwarded-hits.ts";
import { endpointPlace } from "../endpoint-origin.ts";
import { AppError } from "../errors.ts";
import { AuthThrottle } from "../http/auth-throttle.ts";
import { apiDocs } from "../http/plugins/api-docs.ts";
import { Authenticator, rateLimitKey } from "../http/plugins/authentication.ts";
import { registerCompression } from "../http/plugins/compression.ts";
import { registerErrorHandling, sendError } from "../http/plugins/errors.ts";
import { filteredResponses } from "../http/plugins/filtered-responses.ts";
import { refuseNulCharacters } from "../http/plugins/nul-characters.ts";
import { sharedRateLimitStore } from "../http/plugins/rate-limit-store.ts";
import { applyRequestRules } from "../http/plugins/request-rules.ts";
import { RouteIndex } from "../http/plugins/route-index.ts";
import { SessionCookies } from "../http/plugins/session.ts";
import { accountRoutes } from "../http/routes/accounts.ts";
import { adminRoutes } from "../http/routes/admin.ts";
import { catalogRoutes } from "../http/routes/catalog.ts";
import { componentRoutes } from "../http/routes/components.ts";
import { consoleRoutes } from "../http/routes/console.ts";
import { deliveryRoutes } from "../http/routes/deliveries.ts";
import { deliveryHistoryRoutes } from "../http/routes/delivery-history.ts";
import { endpointHandler, endpointPrefix } from "../http/routes/endpoints.ts";
import { eventSearchRoutes } from "../http/routes/event-search.ts";
import { healthRoutes } from "../http/routes/health.ts";
import { countRequests, metricsRoutes } from "../http/routes/metrics.ts";
import { orgRoutes } from "../http/routes/orgs.ts";
import { replayRoutes } from "../http/routes/replays.ts";
import { sessionRoutes } from "../http/routes/sessions.ts";
import { sourceEventRoutes } from "../http/routes/source-events.ts";
import { sourceRoutes } from "../http/routes/sources.ts";
import { streamRoutes } from "../http/routes/stream.ts";
import { subscriptionRoutes } from "../http/routes/subscriptions.ts";
import { userRoutes } from "../http/routes/users.ts";
import { webhookRoutes } from "../http/routes/webhooks.ts";
import { workflowRoutes } from "../http/routes/workflows.ts";
import type { Services } from "../services.ts";
import type { App, FrontDoor } from "./front-door.ts";
import { registerJsonBodies } from "./json-bodies.ts";

/** What the HTTP side needs besides the app and its front door. */
export interface HttpInputs {
  config: Config;
  clock: Clock;
  secrets: SecretBox;
  services: Services;
  /** Several nodes: the cluster's pre-shared key, on which the others forward hits here. */
  forwardPsk: Buffer | undefined;
}

export async function registerHttp(app: App, door: FrontDoor, given: HttpInputs): Promise<void> {
  const { config, clock, secrets, services } = given;
  const { store, accounts, sessions } = services;
  app.decorate("fount", services);
  app.decorateRequest("principal", null);
  registerErrorHandling(app);
  registerJsonBodies(app);
  refuseNulCharacters(app);
  applyRequestRules(app);

  const routeIndex = new RouteIndex();
  routeIndex.attach(app);
  // include/exclude, on the routes that declare them (and only there).
  filteredResponses(app);
  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split("?")[0] ?? "/";
    if (path.startsWith(endpointPrefix)) {
      return sendError(
        reply,
        new AppError(
          "wrong_origin",
          `Source endpoints are not served here: they are at ${endpointPlace(config.endpointUrl)}`,
          { details: { endpoints: endpointPlace(config.endpointUrl) } },
        ),
      );
    }
    const allowed = routeIndex.allowed(path);
    if (allowed.length > 0) {
      reply.header("allow", allowed.join(", "));
      return sendError(
        reply,
        new AppError("method_not_allowed", `${request.method} is not allowed on ${path}`),
      );
    }
    return sendError(reply, new AppError("not_found", `No route ${request.method} ${path}`));
  });

  const authenticator = new Authenticator({
    accounts,
    sessions,
    cookies: new SessionCookies(secrets, { secure: config.publicUrl.startsWith("https:") }),
    throttle: new AuthThrottle({
      maxFailures: config.authFailureLimit,
      windowMs: config.authFailureWindowMs,
      now: () => clock.now(),
    }),
    clock,
  });
  app.addHook("preClose", async () => {
    door.closing = true;
    // Other nodes' hits already taken are answered; new ones are turned down, to run where they came in.
    // Endpoint requests in flight are answered too, before the executors and the store close.
    await Promise.all([door.forwardedHits?.close(), door.endpointListener?.close()]);
  });
  // Hooks of every request take `done` rather than return a promise where they need not wait: each
  // promise is another turn of the microtask queue per request (issue 29, manual runs).
  app.addHook("onSend", (_request, reply, payload, done) => {
    if (door.closing) reply.header("connection", "close");
    done(null, payload);
  });
  app.addHook("onRequest", async (request, reply) => {
    reply.header("x-request-id", request.id);
    if (door.closing) throw new AppError("shutting_down");
    // Unmatched requests go to the 404/405 handler without asking for a key.
    if (request.routeOptions.url === undefined || request.routeOptions.config.public) return;
    // An API key, or the console's session cookie (http/plugins/authentication.ts).
    request.principal = await authenticator.principal(request);
  });

  await registerCompression(app);
  await app.register(apiDocs, { publicUrl: config.publicUrl });

  if (config.metrics) {
    countRequests(app);
    await app.register(metricsRoutes);
  }
  await app.register(healthRoutes);
  await app.register(
    async (v1) => {
      if (config.rateLimit > 0) {
        await v1.register(rateLimit, {
          max: config.rateLimit,
          timeWindow: 60_000,
          // Nodes sharing the store count together in it; a store error lets the request through to
          // its route, which answers for the store itself.
          ...(store.capabilities.sharedByNodes
            ? { store: sharedRateLimitStore(store, () => clock.now()), skipOnError: true }
            : {}),
          // Per user, whichever key or console session they use; per address without one.
          keyGenerator: rateLimitKey,
          errorResponseBuilder: (_request, context) => {
            const err = new AppError(
              "rate_limited",
              `Rate limit of ${context.max} requests per minute exceeded`,
              {
                headers: { "retry-after": String(Math.ceil(context.ttl / 1000)) },
              },
            );
            return Object.assign(new Error(err.message), { statusCode: 429, appError: err });
          },
        });
      }
      await v1.register(userRoutes);
      await v1.register(adminRoutes);
      await v1.register(webhookRoutes);
      await v1.register(subscriptionRoutes);
      await v1.register(componentRoutes);
      await v1.register(sourceRoutes);
      await v1.register(sourceEventRoutes);
      await v1.register(accountRoutes);
      await v1.register(deliveryRoutes);
      await v1.register(deliveryHistoryRoutes);
      await v1.register(replayRoutes);
      await v1.register(eventSearchRoutes);
      await v1.register(workflowRoutes);
      await v1.register(catalogRoutes);
      await v1.register(orgRoutes);
      await v1.register(sessionRoutes);
    },
    { prefix: "/v1" },
  );
  const served = endpointHandler(services, { closing: () => door.closing });
  door.endpoints = served;
  if (given.forwardPsk)
    door.forwardedHits = new ForwardedHits({
      psk: given.forwardPsk,
      serve: (hit) => served.serveForwarded(hit),
      logger: app.log,
    });
  await app.register(streamRoutes, {
    authenticator,
    hub: { maxStreamsPerUser: config.sseMaxStreams, maxReplaysPerUser: config.sseMaxReplays },
  });
  await app.register(consoleRoutes, { authenticator });
}
