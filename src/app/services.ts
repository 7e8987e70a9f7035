/**
 * The domain wired on the store: the bus and what listens on it (error log, metrics), the committers,
 * the executors, the component catalog, the cluster node (several nodes on PostgreSQL), the source
 * runner, sources, timers and deliveries — gathered into the `Services` the routes and loops use, with
 * what the app's lifecycle starts and stops.
 */
import type { FastifyInstance } from "fastify";
import { Agent as UndiciAgent } from "undici";
import { AddressPolicy } from "../delivery/address-guard.ts";
import { DestinationHealth } from "../delivery/destination-health.ts";
import type { DeliveryDispatcher } from "../delivery/dispatcher.ts";
import { deliveryContext } from "../delivery/routing.ts";
import { setUpDelivery } from "../delivery/setup.ts";
import { Bus } from "../domain/bus.ts";
import { type ClusterNode, clusterNode } from "../domain/cluster/cluster-link.ts";
import { nodeDeadAfterMs } from "../domain/cluster/source-leases.ts";
import { relayWithdrawals } from "../domain/cluster/withdrawal-relay.ts";
import { ComponentCatalog } from "../domain/components/components.ts";
import { DynamicProps } from "../domain/components/dynamic-props.ts";
import { Committer } from "../domain/events/committer.ts";
import { logErrors } from "../domain/events/error-log.ts";
import { EventPruner } from "../domain/events/pruner.ts";
import { EventRecorder } from "../domain/events/recorder.ts";
import { Retention } from "../domain/events/retention.ts";
import { SearchIndexer } from "../domain/events/search-indexer.ts";
import { LateWorkRecorder } from "../domain/sources/late-work.ts";
import { SourceRunner } from "../domain/sources/runner.ts";
import { TimerScheduler } from "../domain/sources/scheduler.ts";
import { SourceService } from "../domain/sources/sources.ts";
import { streamHubOf } from "../http/routes/stream.ts";
import { randomString } from "../ids.ts";
import { Metrics } from "../metrics.ts";
import { ComponentBuilder } from "../runtime/build.ts";
import { ExecutorPool } from "../runtime/executor-pool.ts";
import type { Executor } from "../runtime/types.ts";
import type { Services } from "../services.ts";
import { type Executors, type Isolation, startExecutors } from "./executors.ts";

/** What the services are built from: the store and accounts opened before them, and the app. */
export interface ServiceInputs
  extends Pick<Services, "config" | "clock" | "store" | "secrets" | "accounts" | "sessions"> {
  /** Its logger, and its routes for components that call the Pipedream API. */
  app: FastifyInstance;
  /** Executor to use instead of the sandboxed process pool (never in production). */
  executor: Executor | undefined;
  isolation: Isolation;
}

/** The services, and the parts of them that the app starts, stops and routes to. */
export interface Wired extends Executors {
  services: Services;
  lateWork: LateWorkRecorder;
  committer: Committer;
  /** PostgreSQL: deliveries' results commit on a connection of their own. */
  settlements: Committer | undefined;
  cluster: ClusterNode | undefined;
  scheduler: TimerScheduler;
  dispatcher: DeliveryDispatcher;
  /** The agent of component_url downloads, closed last. */
  fetchAgent: UndiciAgent;
  /** The cluster's pre-shared key for forwarding connections. */
  forwardPsk: Buffer;
}

export async function buildServices(given: ServiceInputs): Promise<Wired> {
  const { config, clock, store, secrets, accounts, sessions, app } = given;
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
  const retention = new Retention(config.retention, clock);
  const recorder = new EventRecorder(retention);
  const pruner = new EventPruner({
    store,
    retention,
    bus,
    clock,
    onError: (err) => app.log.debug({ err }, "pruning events failed; the next pass tries again"),
  });
  const searchIndexer = store.indexEventsForSearch
    ? new SearchIndexer({
        index: store.indexEventsForSearch,
        clock,
        onError: (err) =>
          app.log.debug({ err }, "indexing events for the search failed; the next pass tries again"),
      })
    : undefined;
  const builder = new ComponentBuilder({
    dataDir: config.dataDir,
    npmCacheDir: config.npmCacheDir,
    registry: config.npmRegistry,
    installer: {
      concurrency: config.installConcurrency,
      memoryMb: config.installMemoryMb,
      maxMb: config.installMaxMb,
      cacheMaxMb: config.npmCacheMaxMb,
    },
    keptPackageSets: () => store.listDeployedDependencies(),
    packageSetGraceMs: config.packageSetGraceMs,
  });
  const lateWork = new LateWorkRecorder({ store, committer, recorder, bus, clock, logger: app.log });
  const executors = await startExecutors(config, given.executor, given.isolation, app, lateWork);
  const { executor } = executors;

  // component_url downloads follow the same outbound address rules as webhook deliveries.
  const addressPolicy = new AddressPolicy({
    allowPrivate: config.webhookAllowPrivate,
    allowHosts: config.webhookAllowHosts,
  });
  const fetchGuard = {
    dispatcher: new UndiciAgent({ connect: { lookup: addressPolicy.lookup } }),
    checkUrl: (url: URL) => addressPolicy.checkUrl(url),
  };
  const catalog = new ComponentCatalog({
    store,
    builder,
    executor,
    clock,
    fetchGuard,
    maxOwnerBytes: config.maxComponentBytesPerOwner,
  });
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
  // Deleted routes reach the deliveries the other nodes' dispatchers hold (delivery/withdrawals.ts).
  if (cluster && store.cluster) {
    const stop = await relayWithdrawals({
      cluster: store.cluster,
      nodeId: cluster.leases.nodeId,
      bus,
      logger: app.log,
    });
    app.addHook("onClose", stop);
  }
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
    retention,
    pruner,
    searchIndexer,
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
    spares: () => (executor instanceof ExecutorPool ? executor.spareCount : 0),
    sseClients: () => streamHubOf(services)?.size(),
    sourceDbCacheBytes: () => runner.dbCacheBytes,
    ...(cluster
      ? { clusterPeers: () => ({ live: cluster.link.peers, forwardable: cluster.link.forwardablePeers }) }
      : {}),
  });
  return {
    ...executors,
    services,
    lateWork,
    committer,
    settlements,
    cluster,
    scheduler,
    dispatcher,
    fetchAgent: fetchGuard.dispatcher,
    forwardPsk,
  };
}
