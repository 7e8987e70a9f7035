/**
 * The composition root: wires storage, accounts and the HTTP routes from a Config. It never listens;
 * `main.ts` does, and tests build their own app with their own config.
 */
import { randomUUID } from "node:crypto";
import http, { type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import type { Duplex } from "node:stream";
import rateLimit from "@fastify/rate-limit";
import type { TypeBoxTypeProvider } from "@fastify/type-provider-typebox";
import Fastify, { type FastifyInstance, type FastifyServerOptions } from "fastify";
import { Agent as UndiciAgent } from "undici";
import { type Clock, systemClock } from "./clock.ts";
import type { Config } from "./config.ts";
import { SecretBox } from "./crypto/secret-box.ts";
import { AddressPolicy } from "./delivery/address-guard.ts";
import { DestinationHealth } from "./delivery/destination-health.ts";
import { deliveryContext } from "./delivery/routing.ts";
import { setUpDelivery } from "./delivery/setup.ts";
import { Accounts } from "./domain/accounts/accounts.ts";
import { checkEncryptionKey } from "./domain/accounts/key-check.ts";
import { Sessions } from "./domain/accounts/sessions.ts";
import { Bus } from "./domain/bus.ts";
import { clusterNode } from "./domain/cluster/cluster-link.ts";
import { ForwardedHits } from "./domain/cluster/forwarded-hits.ts";
import { forwardPath } from "./domain/cluster/forwarding-protocol.ts";
import { refuseSharedNodeId } from "./domain/cluster/node-id-check.ts";
import { nodeDeadAfterMs } from "./domain/cluster/source-leases.ts";
import { ComponentCatalog } from "./domain/components/components.ts";
import { DynamicProps } from "./domain/components/dynamic-props.ts";
import { publishRegistryFolder } from "./domain/components/registry.ts";
import { Committer } from "./domain/events/committer.ts";
import { logErrors } from "./domain/events/error-log.ts";
import { EventRecorder } from "./domain/events/recorder.ts";
import { LateWorkRecorder } from "./domain/sources/late-work.ts";
import { SourceRunner } from "./domain/sources/runner.ts";
import { TimerScheduler } from "./domain/sources/scheduler.ts";
import { SourceService } from "./domain/sources/sources.ts";
import { endpointPlace } from "./endpoint-origin.ts";
import { AppError } from "./errors.ts";
import { AuthThrottle } from "./http/auth-throttle.ts";
import { componentApiHandler } from "./http/component-api.ts";
import { EndpointListener, type ServerTimeouts, setUpServer } from "./http/endpoint-listener.ts";
import { apiDocs } from "./http/plugins/api-docs.ts";
import { Authenticator, rateLimitKey } from "./http/plugins/authentication.ts";
import { registerCompression } from "./http/plugins/compression.ts";
import {
  clientErrorHandler,
  frameworkErrors,
  registerErrorHandling,
  sendError,
} from "./http/plugins/errors.ts";
import { filteredResponses } from "./http/plugins/filtered-responses.ts";
import { refuseNulCharacters } from "./http/plugins/nul-characters.ts";
import { sharedRateLimitStore } from "./http/plugins/rate-limit-store.ts";
import { applyRequestRules } from "./http/plugins/request-rules.ts";
import { RouteIndex } from "./http/plugins/route-index.ts";
import { SessionCookies } from "./http/plugins/session.ts";
import { RequestLogController } from "./http/request-log.ts";
import { accountRoutes } from "./http/routes/accounts.ts";
import { adminRoutes } from "./http/routes/admin.ts";
import { catalogRoutes } from "./http/routes/catalog.ts";
import { componentRoutes } from "./http/routes/components.ts";
import { consoleRoutes } from "./http/routes/console.ts";
import { deliveryRoutes } from "./http/routes/deliveries.ts";
import { type EndpointHandler, endpointHandler, endpointPrefix } from "./http/routes/endpoints.ts";
import { healthRoutes } from "./http/routes/health.ts";
import { countRequests, metricsRoutes } from "./http/routes/metrics.ts";
import { orgRoutes } from "./http/routes/orgs.ts";
import { sessionRoutes } from "./http/routes/sessions.ts";
import { sourceEventRoutes } from "./http/routes/source-events.ts";
import { sourceRoutes } from "./http/routes/sources.ts";
import { streamHubOf, streamRoutes } from "./http/routes/stream.ts";
import { subscriptionRoutes } from "./http/routes/subscriptions.ts";
import { userRoutes } from "./http/routes/users.ts";
import { webhookRoutes } from "./http/routes/webhooks.ts";
import { workflowRoutes } from "./http/routes/workflows.ts";
import { randomString } from "./ids.ts";
import { loggerOptions } from "./logging.ts";
import { Metrics } from "./metrics.ts";
import { ComponentBuilder } from "./runtime/build.ts";
import { jsonTextTooDeep, maxBodyDepth } from "./runtime/child/guards/json-depth.ts";
import { executorEgressRules, installEgressRules } from "./runtime/egress.ts";
import { assertExecutorAccess } from "./runtime/executor-access.ts";
import { ExecutorPool } from "./runtime/executor-pool.ts";
import type { Executor } from "./runtime/types.ts";
import { claimUidRange } from "./runtime/uid-range.ts";
import type { Services } from "./services.ts";
import type { Storage } from "./storage/port.ts";
import { openPostgresStorage } from "./storage/postgres/driver.ts";
import { openSqliteStorage } from "./storage/sqlite/driver.ts";

export interface BuildOptions {
  clock?: Clock;
  /** Pino options or false; tests pass `false` or a level. */
  logger?: FastifyServerOptions["logger"];
  /** A store opened by the caller (contract tests, the CLI); default: opened from config. */
  store?: Storage;
  /** Start the real-time timer loop when the app is ready (default true); tests drive `scheduler.tick()`. */
  startScheduler?: boolean;
  /** Start the delivery loop when the app is ready (default true); tests may drive `dispatcher.tick()`/`drain()` alone. */
  startDispatcher?: boolean;
  /** Executor to use instead of the sandboxed process pool (never in production). */
  executor?: Executor;
  /** Leave creating the first admin to the caller (main.ts does it once the server listens). */
  deferBootstrap?: boolean;
}

export interface BuiltApp {
  app: FastifyInstance;
  services: Services;
  /** The admin key when this start created it (first start on an empty store), to print once. */
  bootstrap: { username: string; apiKey: string } | undefined;
  /**
   * Listens: the API and console on `host:port`, source endpoints on `host:endpointPort` (default: the
   * config's). Answers the base URL of each as bound. `app.listen` alone leaves endpoints unserved.
   */
  listen(options?: {
    host?: string;
    port?: number;
    endpointPort?: number;
  }): Promise<{ url: string; endpoints: string }>;
  /** One plain line each on what confines component code here (egress, scratch), for the start banner. */
  startNotes: string[];
}

/** Opens the configured store; `existingOnly`: a PostgreSQL schema without a store is refused, not created. */
export async function openStorage(
  config: Config,
  options: { existingOnly?: boolean } = {},
): Promise<Storage> {
  if (config.databaseUrl) {
    return openPostgresStorage({
      url: config.databaseUrl,
      timeoutMs: config.storeTimeoutMs,
      existingOnly: options.existingOnly,
    });
  }
  return openSqliteStorage({ dataDir: config.dataDir });
}

export async function buildApp(config: Config, options: BuildOptions = {}): Promise<BuiltApp> {
  const clock = options.clock ?? systemClock;
  const store = options.store ?? (await openStorage(config));
  const secrets = SecretBox.fromEnvOrFile(process.env.FOUNT_ENCRYPTION_KEY, config.dataDir);
  try {
    await checkEncryptionKey(
      store,
      secrets,
      process.env.FOUNT_ENCRYPTION_KEY ? "FOUNT_ENCRYPTION_KEY" : path.join(config.dataDir, "secret.key"),
    );
    if (store.cluster && !options.store) await refuseSharedNodeId(store.cluster, config.nodeId);
  } catch (err) {
    if (!options.store) await store.close();
    throw err;
  }
  const accounts = new Accounts(store, clock);
  const sessions = new Sessions(store, clock);
  const created = options.deferBootstrap ? undefined : await accounts.bootstrap(config.bootstrapApiKey);
  // Executors under uids of their own (as root, unless turned off) need a uid range no other Fount
  // server on this host uses, and the egress rules for it (docs/isolation.md).
  const isolateUsers = options.executor ? false : (config.executorIsolateUsers ?? process.getuid?.() === 0);
  if (isolateUsers) assertExecutorAccess(config.dataDir);
  const uids = isolateUsers
    ? claimUidRange({ base: config.executorUidBase, dataDir: config.dataDir })
    : undefined;

  // Source endpoints are answered by Node's server directly, before Fastify (routes/endpoints.ts), on a
  // listener of their own (and on the API's, for requests naming the endpoint origin's host).
  let endpoints: EndpointHandler | undefined;
  let endpointListener: EndpointListener | undefined;
  // Several nodes: the connections on which the others forward this node's sources' hits.
  let forwardedHits: ForwardedHits | undefined;
  // From the start of shutdown: new requests get 503, and answers ask clients to close the connection
  // so that keep-alive sockets do not hold the process open.
  let closing = false;
  const app = Fastify({
    logger: options.logger ?? loggerOptions(config),
    logController: new RequestLogController(),
    serverFactory: (fastifyHandler, opts) => {
      const server = http.createServer(
        // Only the other nodes' forwarding connections are upgraded; any other request asking for an
        // upgrade (`Upgrade: h2c` from curl --http2, a WebSocket) is answered as a plain request.
        { shouldUpgradeCallback: (req) => forwardedHits !== undefined && req.url === forwardPath },
        (req, res) => {
          if (endpoints?.onEndpointOrigin(req)) endpoints.listener(req, res);
          else fastifyHandler(req, res);
        },
      );
      server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
        let taken = false;
        try {
          taken = forwardedHits?.accept(req, socket, head) ?? false;
        } catch (err) {
          app.log.error({ err }, "a forwarding connection failed");
        }
        if (!taken) socket.destroy();
      });
      // Fastify has filled in its defaults by now.
      const timeouts = opts as unknown as ServerTimeouts;
      setUpServer(server, timeouts);
      // It binds only once the app listens (`listen` below), when `endpoints` is set.
      endpointListener = new EndpointListener((req, res) => endpoints!.listener(req, res), timeouts);
      return server;
    },
    bodyLimit: config.bodyLimitBytes,
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
  }).withTypeProvider<TypeBoxTypeProvider>();

  const bus = new Bus();
  bus.onError((err) => app.log.error({ err }, "internal event listener failed"));
  logErrors(bus, app.log);
  new DestinationHealth({ bus, logger: app.log, clock }).listen();
  // A lost store is logged when the driver's probe confirms it, and again when it answers; what fails
  // meanwhile (requests, loops) is logged at info or debug only.
  let storeLostAt = 0;
  store.health.onChange((available, reason) => {
    if (!available) {
      storeLostAt = Date.now();
      app.log.error(
        { reason },
        `The database is unreachable (${reason}): answering 503 and retrying until it is back`,
      );
    } else {
      const seconds = Math.round((Date.now() - storeLostAt) / 1000);
      app.log.warn({ downSeconds: seconds }, `The database answers again after ${seconds} s: serving`);
    }
  });
  const metrics = new Metrics(config.nodeId);
  metrics.listen(bus);
  const committerOptions = {
    carried: [deliveryContext],
    observe: (ms: number, jobs: number) => metrics.commit(ms, jobs),
  };
  // On PostgreSQL, where each commit costs a round trip and its statements' planning, a batch waits up
  // to 1 ms for the invocations already handed to an executor (committer.ts, docs/architecture.md).
  const committer = new Committer(store, {
    ...committerOptions,
    lingerMs: store.driver === "postgres" ? 1 : 0,
  });
  // On a store whose transactions run side by side (PostgreSQL), deliveries' results commit on a
  // connection of their own, beside the emits (docs/architecture.md, "Performance").
  const settlements = store.capabilities.sharedByNodes ? new Committer(store, committerOptions) : undefined;
  const recorder = new EventRecorder();
  const builder = new ComponentBuilder({ dataDir: config.dataDir, npmCacheDir: config.npmCacheDir });
  const lateWork = new LateWorkRecorder({ store, committer, recorder, bus, clock, logger: app.log });
  const executor =
    options.executor ??
    new ExecutorPool({
      dataDir: config.dataDir,
      memoryMb: config.executorMemoryMb,
      scratchMb: config.executorScratchMb,
      realmsPerOwner: config.executorRealmsPerOwner,
      defaultTimeoutMs: config.invocationTimeoutMs,
      maxEmitBytes: config.maxEventBytes,
      extraCaCertsFile: config.executorCaCerts,
      isolateUsers,
      uidBase: uids?.base,
      egress: executorEgressRules({
        allowPrivate: config.executorAllowPrivate,
        allowHosts: config.executorAllowHosts,
      }),
      ...(config.pipedreamApi
        ? { pipedreamApi: { handler: componentApiHandler(app), bodyLimit: config.bodyLimitBytes } }
        : {}),
      logger: app.log,
      onLateWork: (work) => lateWork.report(work),
    });
  const egress = options.executor
    ? undefined
    : await installEgressRules({
        allowPrivate: config.executorAllowPrivate,
        allowHosts: config.executorAllowHosts,
        uids,
        logger: app.log,
      });
  // What confines component code here, for the start banner (main.ts prints it).
  const startNotes: string[] = egress ? [egress.summary] : [];
  if (executor instanceof ExecutorPool) {
    // Also unmounts scratch tmpfs a crashed run left behind (runtime/executors/scratch.ts). If the
    // scratch folder cannot be prepared now, the first executor start reports why.
    const scratch = await executor.scratchLimit().catch((err: Error) => err);
    startNotes.push(
      scratch instanceof Error
        ? `scratch: the folders could not be prepared (${scratch.message.split("\n")[0]}); the first executor start will say why`
        : scratch.mode === "tmpfs"
          ? `scratch: each owner's folder is a ${scratch.limitMb} MB tmpfs; writing past it fails with ENOSPC`
          : `scratch: no tmpfs here, so each owner's folder is measured every 500 ms; one over ${scratch.limitMb} MB has its executor stopped (scratch_full) and the folder emptied`,
    );
  }

  // component_url downloads follow the same outbound address rules as webhook deliveries.
  const addressPolicy = new AddressPolicy({
    allowPrivate: config.webhookAllowPrivate,
    allowHosts: config.webhookAllowHosts,
  });
  const fetchGuard = {
    dispatcher: new UndiciAgent({ connect: { lookup: addressPolicy.lookup } }),
    checkUrl: (url: URL) => addressPolicy.checkUrl(url),
  };
  const catalog = new ComponentCatalog({ store, builder, executor, clock, fetchGuard });
  // Several nodes on one database: a source runs on one node at a time (domain/cluster/source-leases.ts), and
  // its hits go to that node (domain/cluster/hit-forwarding.ts) over TLS connections keyed with this secret.
  const forwardPsk = Buffer.from(secrets.derive("fount/forwarding-psk/v2"), "base64url");
  let wakeDispatcher = (): void => undefined;
  const cluster = store.cluster
    ? clusterNode({
        store,
        cluster: store.cluster,
        // One member per process, even where two share a FOUNT_NODE_ID or a restart reuses it.
        nodeId: `${config.nodeId}/${randomString(8)}`,
        bus,
        recorder,
        logger: app.log,
        forget: (sourceId) => runner.forget(sourceId),
        forwardPsk,
        invocationTimeoutMs: config.invocationTimeoutMs,
        // The dispatcher is made below; a wake-up heard before it is not needed (it claims at start).
        onWake: () => wakeDispatcher(),
      })
    : undefined;
  const runner: SourceRunner = new SourceRunner({
    leases: cluster?.leases,
    store,
    committer,
    recorder,
    bus,
    executor,
    catalog,
    secrets,
    clock,
    config,
    logger: app.log,
  });
  await cluster?.start();
  const dynamicProps = new DynamicProps({ store, executor, catalog, secrets, config });
  const sources = new SourceService({ store, catalog, runner, bus, secrets, clock, dynamicProps });
  const scheduler = new TimerScheduler({
    store,
    clock,
    runner,
    bus,
    committer,
    recorder,
    logger: app.log,
    leases: cluster?.leases,
  });
  const dispatcher = setUpDelivery({
    store,
    committer,
    settlements,
    recorder,
    bus,
    runner,
    secrets,
    clock,
    config,
    logger: app.log,
    member: cluster && {
      nodeId: cluster.leases.nodeId,
      deadAfterMs: nodeDeadAfterMs,
      runsHere: (sourceId) => cluster.leases.holds(sourceId),
      wakeOthers: () => cluster.link.wakeOthers(),
    },
  });
  wakeDispatcher = () => dispatcher.wake();
  const services: Services = {
    config,
    clock,
    store,
    secrets,
    accounts,
    sessions,
    logger: app.log,
    bus,
    committer,
    recorder,
    executor,
    catalog,
    runner,
    sources,
    dynamicProps,
    scheduler,
    dispatcher,
    metrics,
    streamInterest: cluster?.link,
    forwarding: cluster?.forwarding,
    memberId: cluster?.leases.nodeId,
  };
  metrics.attach({
    store,
    now: () => clock.now(),
    executors: () => (executor instanceof ExecutorPool ? executor.stats() : []),
    sseClients: () => streamHubOf(services)?.size(),
    ...(cluster
      ? { clusterPeers: () => ({ live: cluster.link.peers, forwardable: cluster.link.forwardablePeers }) }
      : {}),
  });
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
    closing = true;
    // Other nodes' hits already taken are answered; new ones are turned down, to run where they came in.
    // Endpoint requests in flight are answered too, before the executors and the store close.
    await Promise.all([forwardedHits?.close(), endpointListener?.close()]);
  });
  app.addHook("onSend", async (_request, reply) => {
    if (closing) reply.header("connection", "close");
  });
  app.addHook("onRequest", async (request, reply) => {
    reply.header("x-request-id", request.id);
    if (closing) throw new AppError("shutting_down");
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
      await v1.register(workflowRoutes);
      await v1.register(catalogRoutes);
      await v1.register(orgRoutes);
      await v1.register(sessionRoutes);
    },
    { prefix: "/v1" },
  );
  endpoints = endpointHandler(services, { closing: () => closing });
  const served = endpoints;
  if (cluster)
    forwardedHits = new ForwardedHits({
      psk: forwardPsk,
      serve: (hit) => served.serveForwarded(hit),
      logger: app.log,
    });
  await app.register(streamRoutes);
  await app.register(consoleRoutes, { authenticator });

  // Fount's own components (the `registry/` folder) are published before the server answers.
  app.addHook("onReady", async () => {
    await publishRegistryFolder(services);
  });
  app.addHook("onReady", async () => {
    if (options.startScheduler !== false) scheduler.start();
    sessions.startSweeping((err) => app.log.warn({ err }, "could not delete expired console sessions"));
    if (options.startDispatcher !== false) await dispatcher.start();
  });
  // Several nodes: once listening, this node tells the others where to forward its sources' hits.
  app.addHook("onListen", async () => {
    if (!cluster || config.nodeUrl === "off") return;
    const url = config.nodeUrl ?? listeningUrl(app.server.address());
    if (url) cluster.link.advertise(url);
  });
  // Shutdown order: no new timer runs, in-flight commits land, executors stop, then the store closes.
  app.addHook("onClose", async () => {
    sessions.stop();
    await scheduler.stop();
    // Before the commits drain: its last results and released claims go through the committer and store.
    await dispatcher.stop();
    await lateWork.close();
    await committer.drain();
    await settlements?.drain();
    await dispatcher.releaseLeftovers();
    await executor.close();
    await cluster?.close();
    await egress?.close();
    uids?.release();
    await fetchGuard.dispatcher.close();
    await store.close();
  });

  const listener = endpointListener;
  if (!listener) throw new Error("Fastify did not call serverFactory");
  return {
    app,
    services,
    bootstrap: created ? { username: created.user.username, apiKey: created.secret } : undefined,
    listen: async (given = {}) => {
      const host = given.host ?? config.host;
      const url = await app.listen({ host, port: given.port ?? config.port });
      const endpointsUrl = await listener.listen(host, given.endpointPort ?? config.endpointPort);
      return { url: url.replace("localhost", "127.0.0.1"), endpoints: endpointsUrl };
    },
    startNotes,
  };
}

/**
 * JSON bodies: an empty body counts as none (Pipedream's own examples POST query parameters with a JSON
 * content type and no body), `__proto__` keys are dropped, and for POST/PUT the query parameters are
 * merged under the body (the body wins), converted to the body schema's types.
 */
function registerJsonBodies(app: FastifyInstance): void {
  app.removeContentTypeParser("application/json");
  app.addContentTypeParser("application/json", { parseAs: "string" }, (_request, body, done) => {
    const text = (body as string).trim();
    if (text === "") return done(null, undefined);
    // Parsing (with the reviver) and every later step recurse over the value; refuse depth first.
    if (jsonTextTooDeep(text, maxBodyDepth)) return done(new AppError("json_too_deep"), undefined);
    try {
      done(
        null,
        JSON.parse(text, (key, value) => (key === "__proto__" ? undefined : value)),
      );
    } catch (err) {
      done(
        new AppError("invalid_json", `The request body is not valid JSON: ${(err as Error).message}`),
        undefined,
      );
    }
  });
  app.addHook("preValidation", async (request) => {
    if (request.method !== "POST" && request.method !== "PUT") return;
    // Source endpoints take any body as raw bytes; spreading a Buffer here would copy it byte by byte.
    if (Buffer.isBuffer(request.body)) return;
    if (
      request.body !== undefined &&
      (typeof request.body !== "object" || request.body === null || Array.isArray(request.body))
    ) {
      throw new AppError("invalid_parameter", "The request body must be a JSON object", {
        details: { field: "body" },
      });
    }
    const query = (request.query ?? {}) as Record<string, unknown>;
    const bodySchema = request.routeOptions.schema?.body as
      | { properties?: Record<string, { type?: unknown }> }
      | undefined;
    const merged: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(query)) {
      // Unknown query parameters are ignored, as on GET routes; unknown body fields are still a 400.
      if (bodySchema?.properties && !Object.hasOwn(bodySchema.properties, key)) continue;
      merged[key] = coerceQueryValue(value, bodySchema?.properties?.[key]);
    }
    request.body = { ...merged, ...((request.body as Record<string, unknown> | undefined) ?? {}) };
  });
}

/** Query strings carry text; a body schema may want a boolean or an integer there. */
function coerceQueryValue(value: unknown, schema: { type?: unknown } | undefined): unknown {
  if (typeof value !== "string" || !schema) return value;
  const types = Array.isArray(schema.type) ? schema.type : [schema.type];
  if (types.includes("boolean") && (value === "true" || value === "false")) return value === "true";
  if (types.includes("integer") && /^-?\d{1,15}$/.test(value)) return Number(value);
  return value;
}

/**
 * Where other nodes reach this one: the address it listens on, or this machine's first non-loopback
 * IPv4 address when it listens on every address (HOST=0.0.0.0 or ::).
 */
function listeningUrl(address: string | AddressInfo | null): string | undefined {
  if (!address || typeof address === "string") return undefined;
  let host = address.address;
  if (host === "0.0.0.0" || host === "::") {
    const external = Object.values(os.networkInterfaces())
      .flat()
      .find((i) => i?.family === "IPv4" && !i.internal);
    host = external?.address ?? "127.0.0.1";
  }
  return `http://${host.includes(":") ? `[${host}]` : host}:${address.port}`;
}
