/**
 * The composition root: wires storage, accounts and the HTTP routes from a Config. It never listens;
 * `main.ts` does, and tests build their own app with their own config.
 *
 * `buildApp` is the sequence; each part is wired in `app/`: the server in front of Fastify
 * (front-door.ts), the executors (executors.ts), the domain and its loops (services.ts), the HTTP side
 * (http.ts, json-bodies.ts) and what starts and stops with the app (lifecycle.ts).
 */
import path from "node:path";
import type { FastifyInstance, FastifyServerOptions } from "fastify";
import { claimIsolation, type Isolation } from "./app/executors.ts";
import { createFastify, type FrontDoor } from "./app/front-door.ts";
import { registerHttp } from "./app/http.ts";
import { addLifecycle } from "./app/lifecycle.ts";
import { buildServices, type Wired } from "./app/services.ts";
import { type Clock, systemClock } from "./clock.ts";
import type { Config } from "./config.ts";
import { SecretBox } from "./crypto/secret-box.ts";
import { Accounts } from "./domain/accounts/accounts.ts";
import { checkEncryptionKey } from "./domain/accounts/key-check.ts";
import { Sessions } from "./domain/accounts/sessions.ts";
import { refuseSharedNodeId } from "./domain/cluster/node-id-check.ts";
import type { Executor } from "./runtime/types.ts";
import type { Services } from "./services.ts";
import { openStorage } from "./storage/open.ts";
import type { Storage } from "./storage/port.ts";

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
  /**
   * Publish the registry folder's components when the app is ready (default true). Tests that use no
   * registry component leave it out: on a fresh store it builds and inspects each in an executor of
   * its own, about 0.3 s of CPU a start.
   */
  publishRegistry?: boolean;
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
  // What a failed start opened is closed again: an open store (its worker, its pool) or a claimed uid
  // range would keep an embedding process alive, and the next start on the host from stepping over it.
  let isolation: Isolation | undefined;
  let wired: Wired | undefined;
  try {
    const accounts = new Accounts(store, clock);
    const sessions = new Sessions(store, clock);
    accounts.bootstrapPending = options.deferBootstrap === true;
    const created = options.deferBootstrap ? undefined : await accounts.bootstrap(config.bootstrapApiKey);
    isolation = claimIsolation(config, options.executor);
    const { app, door } = createFastify(config, options.logger);
    wired = await buildServices({
      config,
      clock,
      store,
      secrets,
      accounts,
      sessions,
      app,
      executor: options.executor,
      isolation,
    });
    await registerHttp(app, door, {
      config,
      clock,
      secrets,
      services: wired.services,
      forwardPsk: wired.cluster ? wired.forwardPsk : undefined,
    });
    addLifecycle(app, config, wired, isolation, options);
    return built(app, door, wired, created, config);
  } catch (err) {
    await wired?.executor.close().catch(() => {});
    await wired?.cluster?.close().catch(() => {});
    await wired?.egress?.close().catch(() => {});
    isolation?.uids?.release();
    if (!options.store) await store.close().catch(() => {});
    throw err;
  }
}

function built(
  app: FastifyInstance,
  door: FrontDoor,
  wired: Wired,
  created: Awaited<ReturnType<Accounts["bootstrap"]>>,
  config: Config,
): BuiltApp {
  const listener = door.endpointListener;
  if (!listener) throw new Error("Fastify did not call serverFactory");
  return {
    app,
    services: wired.services,
    bootstrap: created ? { username: created.user.username, apiKey: created.secret } : undefined,
    listen: async (given = {}) => {
      const host = given.host ?? config.host;
      const url = await app.listen({ host, port: given.port ?? config.port });
      const endpointsUrl = await listener.listen(host, given.endpointPort ?? config.endpointPort);
      return { url: url.replace("localhost", "127.0.0.1"), endpoints: endpointsUrl };
    },
    startNotes: wired.startNotes,
  };
}
