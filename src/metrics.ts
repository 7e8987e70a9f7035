/**
 * Prometheus metrics (`GET /metrics`, text format, prom-client). Most figures come from the internal bus
 * (invocations, stored events, timer ticks, delivery settlements), so the code that does the work only
 * publishes what it already publishes; the rest is read when scraped (the delivery backlog from the
 * store, executors from the pool, SSE clients from the hub). Every series carries a `node` label, so
 * several nodes scraped into one Prometheus stay apart.
 */
import { readFileSync } from "node:fs";
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import type { Bus } from "./domain/bus.ts";
import { isStoreUnavailable } from "./storage/health.ts";
import type { Storage } from "./storage/port.ts";

/** Seconds: from a fast commit (1 ms) to a run at the default 30 s timeout. */
const durationBuckets = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/** Default metrics dropped for their `_total` suffix; `sum without (type) (fount_<name minus _total>)` is each. */
const sumGauges = [
  "nodejs_active_handles_total",
  "nodejs_active_requests_total",
  "nodejs_active_resources_total",
];

/** What the scrape reads from parts made after the metrics (wired by `attach`). */
export interface MetricSources {
  store: Storage;
  now: () => number;
  /** Per owner: the executor process's pid, if one runs. */
  executors: () => Array<{ pid: number | undefined }>;
  /** Spare executor processes waiting for an owner (runtime/executors/spares.ts). */
  spares?: () => number;
  /** Open SSE streams; undefined before the stream routes load. */
  sseClients: () => number | undefined;
  /** Bytes of the sources' `this.db` the runner keeps in memory (FOUNT_DB_CACHE_BYTES bounds it). */
  sourceDbCacheBytes?: () => number;
  /** Several nodes: the other live nodes at the last heartbeat, and how many gave a URL for forwarded hits. */
  clusterPeers?: () => { live: number; forwardable: number };
}

export class Metrics {
  readonly registry = new Registry();
  readonly #httpRequests: Counter<"method" | "route" | "status">;
  readonly #httpDuration: Histogram<"method" | "route">;
  readonly #endpointHits: Counter<"status">;
  readonly #endpointForwards: Counter<"status">;
  readonly #commitDuration: Histogram;
  readonly #commitJobs: Counter;
  #sources: MetricSources | undefined;

  constructor(nodeId: string) {
    const registry = this.registry;
    registry.setDefaultLabels({ node: nodeId });
    // The event-loop lag is sampled every 100 ms, not prom-client's 10: its timer woke the idle main
    // thread 100 times a second (docs/architecture.md, "Manual runs without the realm's extra wakes").
    collectDefaultMetrics({ register: registry, prefix: "fount_", eventLoopMonitoringPrecision: 100 });
    // prom-client's defaults include three gauges named like counters, which `promtool check metrics`
    // refuses; each is the sum of the per-type gauge beside it (docs/operations.md gives the query).
    for (const name of sumGauges) registry.removeSingleMetric(`fount_${name}`);
    this.#httpRequests = new Counter({
      name: "fount_http_requests_total",
      help: "API requests answered, by route pattern and status (source endpoints are counted apart)",
      labelNames: ["method", "route", "status"],
      registers: [registry],
    });
    this.#httpDuration = new Histogram({
      name: "fount_http_request_duration_seconds",
      help: "API request duration, by route pattern",
      labelNames: ["method", "route"],
      buckets: durationBuckets,
      registers: [registry],
    });
    this.#endpointHits = new Counter({
      name: "fount_endpoint_hits_total",
      help: "Requests to source HTTP endpoints (/e/…), by answer status",
      labelNames: ["status"],
      registers: [registry],
    });
    this.#endpointForwards = new Counter({
      name: "fount_endpoint_forwards_total",
      help: "Several nodes: endpoint requests this node sent on to the node running their source, by answer status (that node counts them as hits)",
      labelNames: ["status"],
      registers: [registry],
    });
    this.#commitDuration = new Histogram({
      name: "fount_store_commit_duration_seconds",
      help: "Time to commit one group transaction of the store",
      buckets: durationBuckets,
      registers: [registry],
    });
    this.#commitJobs = new Counter({
      name: "fount_store_commit_jobs_total",
      help: "Writes committed through group transactions",
      registers: [registry],
    });
    const sources = () => this.#sources;
    new Gauge({
      name: "fount_store_up",
      help: "1 while the store answers, 0 while this node has lost it (PostgreSQL; /readyz answers 503 meanwhile)",
      registers: [registry],
      collect() {
        const s = sources();
        if (s) this.set(s.store.health.available ? 1 : 0);
      },
    });
    new Gauge({
      name: "fount_delivery_backlog",
      help: "Pending deliveries, and those of them already due (state=due)",
      labelNames: ["state"],
      registers: [registry],
      async collect() {
        const s = sources();
        if (!s) return;
        let backlog: { pending: number; due: number };
        try {
          backlog = await s.store.countPendingDeliveries(s.now());
        } catch (err) {
          // A lost store leaves the last figures: /metrics still answers, with the node's own series.
          if (isStoreUnavailable(err)) return;
          throw err;
        }
        this.set({ state: "pending" }, backlog.pending);
        this.set({ state: "due" }, backlog.due);
      },
    });
    new Gauge({
      name: "fount_executors_running",
      help: "Executor processes running (one per owner with work)",
      registers: [registry],
      collect() {
        const s = sources();
        if (s) this.set(s.executors().filter((e) => e.pid !== undefined).length);
      },
    });
    new Gauge({
      name: "fount_executor_spares",
      help: "Spare executor processes waiting for an owner (FOUNT_EXECUTOR_SPARES)",
      registers: [registry],
      collect() {
        const n = sources()?.spares?.();
        if (n !== undefined) this.set(n);
      },
    });
    new Gauge({
      name: "fount_executors_memory_bytes",
      help: "Resident memory of all executor processes together",
      registers: [registry],
      collect() {
        const s = sources();
        if (!s) return;
        let bytes = 0;
        for (const { pid } of s.executors()) if (pid !== undefined) bytes += residentBytes(pid);
        this.set(bytes);
      },
    });
    new Gauge({
      name: "fount_sse_clients",
      help: "Open SSE streams",
      registers: [registry],
      collect() {
        const n = sources()?.sseClients();
        if (n !== undefined) this.set(n);
      },
    });
    new Gauge({
      name: "fount_source_db_cache_bytes",
      help: "Bytes of the sources' this.db the server keeps in memory (FOUNT_DB_CACHE_BYTES)",
      registers: [registry],
      collect() {
        const n = sources()?.sourceDbCacheBytes?.();
        if (n !== undefined) this.set(n);
      },
    });
    new Gauge({
      name: "fount_cluster_peers",
      help: "Several nodes: the other live nodes this node saw at its last heartbeat (forwardable: those it can forward hits to)",
      labelNames: ["state"],
      registers: [registry],
      collect() {
        const peers = sources()?.clusterPeers?.();
        if (!peers) return;
        this.set({ state: "live" }, peers.live);
        this.set({ state: "forwardable" }, peers.forwardable);
      },
    });
  }

  /** Counts what the bus reports: invocations, stored events, timer ticks, deliveries and destinations. */
  listen(bus: Bus): void {
    const registry = this.registry;
    const invocations = new Counter({
      name: "fount_invocations_total",
      help: "Source invocations, by trigger (http, timer, manual, subscription, hook) and outcome",
      labelNames: ["trigger", "outcome"],
      registers: [registry],
    });
    const invocationDuration = new Histogram({
      name: "fount_invocation_duration_seconds",
      help: "Source invocation duration, from dispatch to commit, by trigger",
      labelNames: ["trigger"],
      buckets: durationBuckets,
      registers: [registry],
    });
    const events = new Counter({
      name: "fount_events_stored_total",
      help: "Events stored, by kind: emit (a source's channels), log ($logs), error ($errors)",
      labelNames: ["kind"],
      registers: [registry],
    });
    const ticks = new Counter({
      name: "fount_timer_ticks_total",
      help: "Timer ticks handled, by result: fired, or skipped (the previous run still ran)",
      labelNames: ["result"],
      registers: [registry],
    });
    const lateness = new Histogram({
      name: "fount_timer_lateness_seconds",
      help: "How late a timer tick was handled after its scheduled time",
      buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers: [registry],
    });
    const deliveries = new Counter({
      name: "fount_deliveries_total",
      help: "Delivery attempts and decisions, by listener kind and outcome (succeeded, retry, failed)",
      labelNames: ["kind", "outcome"],
      registers: [registry],
    });
    const attemptDuration = new Histogram({
      name: "fount_delivery_attempt_duration_seconds",
      help: "Duration of one delivery attempt (a webhook request, a listener source's run)",
      labelNames: ["kind"],
      buckets: durationBuckets,
      registers: [registry],
    });
    const deliveryLatency = new Histogram({
      name: "fount_delivery_latency_seconds",
      help: "From an event's commit to its delivery's settlement (successful ones)",
      labelNames: ["kind"],
      buckets: durationBuckets,
      registers: [registry],
    });
    const destinationChanges = new Counter({
      name: "fount_destination_state_changes_total",
      help: "Delivery destinations (webhooks, workflows, listener sources) that started failing or recovered, as this node's attempts found them, by listener kind and state",
      labelNames: ["kind", "state"],
      registers: [registry],
    });
    const failingDestinations = new Gauge({
      name: "fount_destinations_failing",
      help: "Delivery destinations whose last attempt from this node failed",
      registers: [registry],
    });
    bus.on("destination.changed", (c) => {
      if (c.state !== "forgotten") destinationChanges.inc({ kind: c.kind, state: c.state });
      failingDestinations.set(c.failing);
    });
    bus.on("invocation.finished", (i) => {
      const outcome = i.ok ? "ok" : (i.errorCode ?? "error");
      invocations.inc({ trigger: i.trigger, outcome });
      invocationDuration.observe({ trigger: i.trigger }, i.durationMs / 1000);
    });
    bus.on("event.stored", (e) => {
      events.inc({ kind: e.channel === "$logs" ? "log" : e.channel === "$errors" ? "error" : "emit" });
    });
    bus.on("timer.fired", (t) => {
      ticks.inc({ result: t.skipped ? "skipped" : "fired" });
      if (!t.skipped)
        lateness.observe(Math.max(0, this.#sources ? this.#sources.now() - t.scheduledMs : 0) / 1000);
    });
    bus.on("delivery.settled", (d) => {
      deliveries.inc({ kind: d.kind, outcome: d.outcome });
      if (d.durationMs !== null) attemptDuration.observe({ kind: d.kind }, d.durationMs / 1000);
      if (d.outcome === "succeeded") deliveryLatency.observe({ kind: d.kind }, d.latencyMs / 1000);
    });
  }

  /** Gives the scrape the parts it reads (made after the metrics themselves). */
  attach(sources: MetricSources): void {
    this.#sources = sources;
  }

  httpRequest(method: string, route: string, status: number, seconds: number): void {
    this.#httpRequests.inc({ method, route, status });
    this.#httpDuration.observe({ method, route }, seconds);
  }

  endpointHit(status: number): void {
    this.#endpointHits.inc({ status });
  }

  endpointForwarded(status: number): void {
    this.#endpointForwards.inc({ status });
  }

  commit(ms: number, jobs: number): void {
    this.#commitDuration.observe(ms / 1000);
    this.#commitJobs.inc(jobs);
  }
}

/** A process's resident memory from /proc (0 when it is gone or /proc cannot say). */
function residentBytes(pid: number): number {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    return Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? 0) * 1024;
  } catch {
    return 0;
  }
}
