/**
 * `npm run bench`: the performance figures of issues 3, 4 and 29 in one run, printed as a table with the
 * targets. Every server under test runs in its own process, started fresh for its part. Parts marked
 * `eachStore` run once per store (SQLite, then PostgreSQL), their figures named with the store; the
 * others run once, on the first store.
 *
 *   npm run bench                         all parts, on both stores
 *   npm run bench -- --only http,sse      some parts (http, manual, deploy, webhooks, sse, timers, sibling,
 *                                         cli, cluster, cluster-capped, traces, history-search, tenants,
 *                                         history-retention)
 *   FOUNT_BENCH_SEARCH_EVENTS=100000 npm run bench -- --only history-search
 *                                         the event search over fewer stored events than the issue's
 *                                         1,000,000 (a quick run)
 *   npm run bench -- --duration 5         shorter load runs
 *   npm run bench -- --only tenants --tenants 100   fewer tenants in the many-tenants run (1,000)
 *   npm run bench -- --json out.json      also write every figure and raw detail
 *   npm run bench -- --cpu-prof dir       write the Fount servers' CPU profiles to dir
 *   npm run bench -- --strict             exit 1 when a figure misses its target
 *   npm run bench -- --store postgres     only PostgreSQL (--pg-url, default the local `test` database);
 *                                         --store sqlite: only SQLite; the default, both, runs both
 *   npm run bench -- --only history-retention --retention-events 10000 --prune-events 100000
 *                                         retention's sizes (default 100,000 and 1,000,000) for a quick run
 *   npm run bench -- --only history-retention --retention-slice 10
 *                                         the two windows' alternating slices, in seconds (default 2)
 */
import { writeFileSync } from "node:fs";
import os from "node:os";
import { parseArgs } from "node:util";
import type { Figure, PartResult } from "./lib/report.ts";
import { table } from "./lib/report.ts";
import { benchStores, partRuns } from "./lib/stores.ts";
import { deployToFirstEvent, manualRun } from "./parts/api-latency.ts";
import { cliStart } from "./parts/cli-start.ts";
import { cluster } from "./parts/cluster.ts";
import { clusterCapped } from "./parts/cluster-capped.ts";
import { type BenchSettings, type BenchStore, PartContext } from "./parts/context.ts";
import { historyRetention } from "./parts/history-retention.ts";
import { historySearch } from "./parts/history-search.ts";
import { httpIngest } from "./parts/http-ingest.ts";
import { sibling } from "./parts/sibling.ts";
import { sseFanOut } from "./parts/sse.ts";
import { tenantsCost } from "./parts/tenants.ts";
import { timers } from "./parts/timers.ts";
import { tracesCost } from "./parts/traces.ts";
import { webhooks } from "./parts/webhooks.ts";

type Part = (ctx: PartContext, out: { figures: Figure[]; details: Record<string, unknown> }) => Promise<void>;

/** A part of the run; with `eachStore`, run on every store of the run rather than on the first only. */
interface PartEntry {
  title: string;
  run: Part;
  eachStore?: boolean;
}

const parts: Record<string, PartEntry> = {
  http: { title: "HTTP source", run: httpIngest, eachStore: true },
  manual: { title: "Manual run", run: manualRun },
  deploy: { title: "Deploy", run: deployToFirstEvent },
  webhooks: { title: "Webhooks", run: webhooks, eachStore: true },
  sse: { title: "SSE fan-out", run: sseFanOut },
  timers: { title: "Timers", run: timers },
  sibling: { title: "Sibling", run: sibling },
  cli: { title: "CLI start", run: cliStart },
  cluster: { title: "Cluster", run: cluster },
  "cluster-capped": { title: "Cluster, 0.4 CPU per node", run: clusterCapped },
  traces: { title: "Traces", run: tracesCost },
  "history-search": { title: "History search", run: historySearch, eachStore: true },
  tenants: { title: "Tenants", run: tenantsCost },
  "history-retention": { title: "History retention", run: historyRetention, eachStore: true },
};

const { values } = parseArgs({
  options: {
    only: { type: "string" },
    duration: { type: "string", default: "10" },
    warmup: { type: "string", default: "3" },
    connections: { type: "string", default: "50" },
    "webhook-rate": { type: "string", default: "3500" },
    "sse-clients": { type: "string", default: "1000" },
    "sse-rate": { type: "string", default: "50" },
    tenants: { type: "string", default: "1000" },
    "retention-events": { type: "string" },
    "prune-events": { type: "string" },
    "retention-slice": { type: "string" },
    json: { type: "string" },
    "cpu-prof": { type: "string" },
    strict: { type: "boolean", default: false },
    store: { type: "string", default: "both" },
    "pg-url": {
      type: "string",
      default: process.env.FOUNT_BENCH_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test",
    },
  },
});

function positive(name: string, text: string | undefined): number {
  const n = Number(text);
  if (!Number.isFinite(n) || n <= 0) {
    console.error(`--${name} must be a positive number, got ${text}`);
    process.exit(2);
  }
  return n;
}

const settings: BenchSettings = {
  durationS: positive("duration", values.duration),
  warmupS: positive("warmup", values.warmup),
  connections: positive("connections", values.connections),
  webhookRate: positive("webhook-rate", values["webhook-rate"]),
  sseClients: positive("sse-clients", values["sse-clients"]),
  sseRate: positive("sse-rate", values["sse-rate"]),
  tenants: positive("tenants", values.tenants),
  cpuProfDir: values["cpu-prof"],
  retentionEvents: values["retention-events"]
    ? positive("retention-events", values["retention-events"])
    : undefined,
  pruneEvents: values["prune-events"] ? positive("prune-events", values["prune-events"]) : undefined,
  retentionSliceS: values["retention-slice"]
    ? positive("retention-slice", values["retention-slice"])
    : undefined,
  pgUrl: values["pg-url"],
  store: { driver: "sqlite" },
};
const stores = benchStores(values.store ?? "both", settings.pgUrl);
if (!stores) {
  console.error(`--store must be sqlite, postgres or both, got ${values.store}`);
  process.exit(2);
}
settings.store = stores[0]!;

const selected = values.only ? values.only.split(",").map((s) => s.trim()) : Object.keys(parts);
for (const name of selected) {
  if (!parts[name]) {
    console.error(`unknown part ${name}; parts are ${Object.keys(parts).join(", ")}`);
    process.exit(2);
  }
}

const log = (message: string) => process.stderr.write(`[bench] ${message}\n`);
log(
  `${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? "?"}), ${Math.round(os.totalmem() / 2 ** 30)} GiB, ` +
    `Node ${process.version}; load average ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(" ")}; stores: ${stores.map((s) => s.driver).join(", ")}; parts: ${selected.join(", ")}`,
);

/** Runs one part on one store; with `label`, its figures' part names say the store. */
async function runPart(entry: PartEntry, store: BenchStore, label: string | undefined): Promise<PartResult> {
  const named = (title: string) => (label ? `${title} (${label})` : title);
  const ctx = new PartContext({ ...settings, store }, log);
  const out = { figures: [] as Figure[], details: {} as Record<string, unknown> };
  const started = performance.now();
  let error: string | undefined;
  try {
    await entry.run(ctx, out);
  } catch (err) {
    error = (err as Error).stack ?? String(err);
    log(`${named(entry.title)} failed: ${error}`);
  } finally {
    await ctx.cleanup();
  }
  for (const f of out.figures) f.part = named(f.part);
  return {
    part: named(entry.title),
    figures: out.figures,
    details: { store: store.driver, ...out.details },
    error,
    seconds: (performance.now() - started) / 1000,
  };
}

const results: PartResult[] = [];
for (const { name, store, label } of partRuns(parts, selected, stores))
  results.push(await runPart(parts[name]!, store, label));

console.log(table(results));
const misses = results.flatMap((r) => r.figures).filter((f) => f.verdict === "MISS" || f.verdict === "FAIL");
const failed = results.filter((r) => r.error);
console.log(
  `\n${results.flatMap((r) => r.figures).filter((f) => f.verdict === "PASS").length} targets met, ${misses.length} missed, ` +
    `${failed.length} parts failed; ${settings.durationS} s load runs at ${settings.connections} connections; ` +
    `stores ${stores.map((s) => s.driver).join(", ")}; load average ${os.loadavg()[0]!.toFixed(2)} at the end.`,
);
if (values.json) {
  writeFileSync(
    values.json,
    `${JSON.stringify({ settings: { ...settings, stores }, machine: { cpus: os.cpus().length, node: process.version }, results }, null, 2)}\n`,
  );
  log(`wrote ${values.json}`);
}
process.exitCode = failed.length > 0 || (values.strict && misses.length > 0) ? 1 : 0;
// Keep-alive sockets of the bench's own client must not hold the process open.
process.exit();
