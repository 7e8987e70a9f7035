/**
 * The app's HTTP server and its Fastify instance. Source endpoints are answered by Node's server
 * directly, before Fastify (http/routes/endpoints.ts), on a listener of their own and on the API's for
 * requests naming the endpoint origin's host; the other nodes' forwarding connections arrive as
 * upgrades of the API's. The server is made before the routes that answer there: `FrontDoor` holds them
 * once they are wired.
 */
import { randomUUID } from "node:crypto";
import http, { type IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import type { TypeBoxTypeProvider } from "@fastify/type-provider-typebox";
import Fastify, { type FastifyServerOptions } from "fastify";
import type { Config } from "../config.ts";
import type { ForwardedHits } from "../domain/cluster/forwarded-hits.ts";
import { forwardPath } from "../domain/cluster/forwarding-protocol.ts";
import {
  type ConnectionLimits,
  checkingInterval,
  EndpointListener,
  type ServerTimeouts,
  setUpServer,
} from "../http/endpoint-listener.ts";
import { clientErrorHandler, frameworkErrors } from "../http/plugins/errors.ts";
import { RequestLogController } from "../http/request-log.ts";
import type { EndpointHandler } from "../http/routes/endpoints.ts";
import { RouteSchemas } from "../http/schema-compilers.ts";
import { loggerOptions } from "../logging.ts";

/** What the server hands requests to besides Fastify, set as the app is wired. */
export interface FrontDoor {
  /** Source endpoints (routes/endpoints.ts), set with the routes. */
  endpoints: EndpointHandler | undefined;
  /** The endpoint origin's own listener, made with the server; it binds only once the app listens. */
  endpointListener: EndpointListener | undefined;
  /** Several nodes: the connections on which the others forward this node's sources' hits. */
  forwardedHits: ForwardedHits | undefined;
  /**
   * From the start of shutdown: new requests get 503, and answers ask clients to close the connection
   * so that keep-alive sockets do not hold the process open.
   */
  closing: boolean;
}

/** The app's Fastify instance and what its server hands over to besides it. */
export function createFastify(config: Config, logger: FastifyServerOptions["logger"] | undefined) {
  const door: FrontDoor = {
    endpoints: undefined,
    endpointListener: undefined,
    forwardedHits: undefined,
    closing: false,
  };
  const routeSchemas = new RouteSchemas();
  const app = Fastify({
    logger: logger ?? loggerOptions(config),
    logController: new RequestLogController(),
    serverFactory: (fastifyHandler, opts) => {
      const limits: ConnectionLimits = {
        headersTimeoutMs: config.headersTimeoutMs,
        maxConnections: config.maxConnections,
        // Behind a reverse proxy every connection comes from the proxy, which bounds its clients itself.
        maxPerAddress: config.trustProxy === false ? config.maxConnectionsPerAddress : 0,
      };
      const server = http.createServer(
        // Only the other nodes' forwarding connections are upgraded; any other request asking for an
        // upgrade (`Upgrade: h2c` from curl --http2, a WebSocket) is answered as a plain request.
        {
          shouldUpgradeCallback: (req) => door.forwardedHits !== undefined && req.url === forwardPath,
          connectionsCheckingInterval: checkingInterval(limits),
        },
        (req, res) => {
          if (door.endpoints?.onEndpointOrigin(req)) door.endpoints.listener(req, res);
          else fastifyHandler(req, res);
        },
      );
      server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
        let taken = false;
        try {
          taken = door.forwardedHits?.accept(req, socket, head) ?? false;
        } catch (err) {
          app.log.error({ err }, "a forwarding connection failed");
        }
        if (!taken) socket.destroy();
      });
      // Fastify has filled in its defaults by now.
      const timeouts = opts as unknown as ServerTimeouts;
      setUpServer(server, timeouts, limits);
      // It binds only once the app listens (`listen` in app.ts), when `endpoints` is set.
      door.endpointListener = new EndpointListener(
        (req, res) => door.endpoints!.listener(req, res),
        timeouts,
        limits,
      );
      return server;
    },
    bodyLimit: config.bodyLimitBytes,
    // A request must arrive whole within this (Fastify's default, 0, let a dripping body hold its socket
    // for ever); what the server then takes to answer is not bounded by it.
    requestTimeout: config.requestTimeoutMs,
    routerOptions: { ignoreTrailingSlash: true, ignoreDuplicateSlashes: true, maxParamLength: 200 },
    genReqId: (req) => {
      const given = req.headers["x-request-id"];
      return typeof given === "string" && /^[\w.-]{1,128}$/.test(given) ? given : randomUUID();
    },
    frameworkErrors,
    clientErrorHandler,
    // Newer Pipedream clients say workspace for organization: /v1/workspaces/o_…/sources is /v1/orgs/o_…/sources.
    rewriteUrl: (req) =>
      req.url?.replace(/^\/v1\/workspaces\/(o_[A-Za-z0-9]+)\/(?=[^?#])/, "/v1/orgs/$1/") ?? "/",
    return503OnClosing: false,
    // The client address (auth throttle, rate limit without a key) is the connection's, or with
    // FOUNT_TRUST_PROXY the one the listed proxies forwarded (X-Forwarded-For); never a header by default.
    trustProxy: config.trustProxy,
    forceCloseConnections: "idle",
    // Start-up publishes the registry (`onReady`): each component is built and loaded in an executor, one
    // after another. That took over 10 s (Fastify's default bound) on a 2-core machine under load, which
    // failed the start; every step has its own timeout, so this only bounds a hang.
    pluginTimeout: 300_000,
    schemaController: { compilersFactory: routeSchemas.factory() },
  }).withTypeProvider<TypeBoxTypeProvider>();
  app.decorate("routeSchemas", routeSchemas);
  return { app, door };
}

/** The app's Fastify instance, with the TypeBox type provider. */
export type App = ReturnType<typeof createFastify>["app"];
