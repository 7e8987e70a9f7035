/**
 * Retention the owner chooses (issue 28): ingest into a channel keeping 100,000 events against one
 * keeping 100 (alternating slices on one server, target within 10 %), ingest latency at a steady rate
 * while the pruner deletes 1,000,000 events of another source whose retention dropped to 100 (target
 * p99 ≤ 25 ms), and disk bytes per stored event, read from the store itself (SQLite's pages in its two files, PostgreSQL's
 * `pg_total_relation_size`). `--retention-events` and `--prune-events` make the sizes smaller for a quick run.
 */

import path from "node:path";
import { DatabaseSync } from "node:sqlite";
import pg from "pg";
import { interleavedLoad } from "../lib/interleave.ts";
import { runLoad } from "../lib/load.ts";
import type { FountProcess } from "../lib/processes.ts";
import { type Figure, figure } from "../lib/report.ts";
import { distribution } from "../lib/stats.ts";
import { type PartContext, payload, payloadText } from "./context.ts";

const part = "History retention";
/** Seconds of each load run while the pruner works, between looks at its progress. */
const pruneSliceS = 2;
/** Emits per run when filling a window (the executor's limit per invocation). */
const fillPerRun = 1000;
/** Steady rate of the latency runs: a load the machine carries, so that latency is not queueing. */
const steadyRate = 200;

/** An HTTP source that emits the body, and `n` copies of the bench payload when run by hand with `{n}`. */
const fillerCode = `export default {
  name: "bench-retention",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  run(event) {
    if (event && typeof event.n === "number") {
      for (let i = 0; i < event.n; i++) this.$emit({ ...${JSON.stringify(payload)}, i });
    } else this.$emit(event.body);
  },
};
`;

/** Counts and sizes read from the server's store beside it. */
interface StoreProbe {
  count(emitterId: string): Promise<number>;
  /** Bytes the store uses for events (PostgreSQL) or in all (SQLite, whose pages hold little else here). */
  bytes(): Promise<number>;
  close(): Promise<void>;
}

async function probe(fount: FountProcess): Promise<StoreProbe> {
  if (fount.databaseUrl) {
    const client = new pg.Client({ connectionString: fount.databaseUrl });
    await client.connect();
    return {
      count: async (id) =>
        Number(
          (await client.query("SELECT count(*) AS n FROM events WHERE emitter_id = $1", [id])).rows[0].n,
        ),
      bytes: async () =>
        Number((await client.query("SELECT pg_total_relation_size('events') AS b")).rows[0].b),
      close: () => client.end(),
    };
  }
  const db = new DatabaseSync(path.join(fount.dataDir, "fount.db"), { readOnly: true });
  // The event search's index has a file of its own (fount-search.db): its pages count too.
  db.prepare("ATTACH DATABASE ? AS search").run(path.join(fount.dataDir, "fount-search.db"));
  const inUse = (schema: string) => {
    const pragma = (name: string) =>
      Number((db.prepare(`PRAGMA ${schema}.${name}`).get() as Record<string, number>)[name]);
    return (pragma("page_count") - pragma("freelist_count")) * pragma("page_size");
  };
  return {
    count: async (id) =>
      Number(
        (db.prepare("SELECT count(*) AS n FROM events WHERE emitter_id = ?").get(id) as { n: number }).n,
      ),
    bytes: async () => inUse("main") + inUse("search"),
    close: async () => db.close(),
  };
}

/** Seconds of the server's (with its executors) and PostgreSQL's CPU per acknowledged hit. */
const cpuPerHit = (r: { ok: number; cpu: { serverS: number; postgresS: number } }) =>
  (r.cpu.serverS + r.cpu.postgresS) / Math.max(1, r.ok);

/** Emits `n` events into a source's default channel, `fillPerRun` a run, four runs at a time. */
async function fill(fount: FountProcess, sourceId: string, n: number): Promise<void> {
  let left = n;
  const worker = async () => {
    while (left > 0) {
      const take = Math.min(fillPerRun, left);
      left -= take;
      await fount.api("POST", `/v1/sources/${sourceId}/run`, { event: { n: take } }, 120_000);
    }
  };
  await Promise.all([worker(), worker(), worker(), worker()]);
}

export async function historyRetention(
  ctx: PartContext,
  out: { figures: Figure[]; details: Record<string, unknown> },
): Promise<void> {
  const { durationS, warmupS, connections } = ctx.settings;
  const big = ctx.settings.retentionEvents ?? 100_000;
  const pruned = ctx.settings.pruneEvents ?? 1_000_000;
  const sliceS = ctx.settings.retentionSliceS ?? 2;
  const fount = await ctx.fount(undefined, {
    FOUNT_RETENTION_MAX_EVENTS: String(Math.max(1_000_000, big, pruned)),
  });
  const store = await probe(fount);
  try {
    // The same component for both, so that only the retention differs.
    const small = await fount.deploy(fillerCode, "bench-keep-100");
    const large = await fount.deploy(fillerCode, "bench-keep-large");
    await fount.api("PUT", `/v1/sources/${large.id}`, { retention: { events: big } });

    // Disk per event: the store's growth while the large window fills.
    ctx.log(`${part}: filling a window of ${big.toLocaleString("en-US")} events`);
    const bytesBefore = await store.bytes();
    const countBefore = await store.count(large.id);
    const filledAt = performance.now();
    await fill(fount, large.id, big);
    const fillS = (performance.now() - filledAt) / 1000;
    const stored = (await store.count(large.id)) - countBefore;
    // A search brings SQLite's index up to date with the fill first (PostgreSQL's is, at commit).
    await fount.api("GET", `/v1/sources/${large.id}/event_summaries?limit=1&q=zzzz`, undefined, 600_000);
    const perEvent = ((await store.bytes()) - bytesBefore) / stored;

    ctx.log(
      `${part}: warm-up ${warmupS} s each, then retention ${big} and 100 in alternating ${sliceS} s slices`,
    );
    await runLoad({ url: small.endpointUrl, body: payloadText, connections, durationS: warmupS });
    await runLoad({ url: large.endpointUrl, body: payloadText, connections, durationS: warmupS });
    const slices = Math.max(1, Math.round(durationS / sliceS));
    const [hundred, large100k] = await interleavedLoad(
      { url: small.endpointUrl, pid: fount.pid },
      { url: large.endpointUrl, pid: fount.pid },
      { body: payloadText, connections, slices, sliceS },
    );

    // Pruning: a window of `pruned` events whose retention drops to 100, while another source ingests.
    const doomed = await fount.deploy(fillerCode, "bench-pruned");
    await fount.api("PUT", `/v1/sources/${doomed.id}`, { retention: { events: pruned } });
    ctx.log(`${part}: filling a window of ${pruned.toLocaleString("en-US")} events to prune`);
    await fill(fount, doomed.id, pruned);
    // As after the first fill, SQLite's index catches up first: a million events stored within minutes
    // leave its worker indexing for about as long again, on a core the pruner and ingest then share.
    // A window that grew at the pace of ordinary traffic was indexed as it grew.
    await fount.api("GET", `/v1/sources/${doomed.id}/event_summaries?limit=1&q=zzzz`, undefined, 600_000);
    const steady = { url: small.endpointUrl, body: payloadText, connections: 10, overallRate: steadyRate };
    const quiet = await runLoad({ ...steady, durationS });
    await fount.api("PUT", `/v1/sources/${doomed.id}`, { retention: { events: 100 } });
    const pruneStart = performance.now();
    const during: number[] = [];
    let ok = 0;
    let left = await store.count(doomed.id);
    // Load in slices until the pruner is done (at most ten minutes).
    while (left > 100 && performance.now() - pruneStart < 600_000) {
      const r = await runLoad({ ...steady, durationS: pruneSliceS, latencies: during });
      ok += r.ok;
      left = await store.count(doomed.id);
    }
    const pruneS = (performance.now() - pruneStart) / 1000;
    const whilePruning = distribution(during);
    out.details.retention = {
      big,
      pruned,
      fillS,
      stored,
      perEvent,
      hundred,
      large100k,
      quiet,
      pruneS,
      left,
      ok,
    };

    const rate = (l: { okPerS: number; sliceRates: number[] }) =>
      `${l.okPerS.toFixed(0)}/s; slices ${l.sliceRates.join(" ")}`;
    out.figures.push(
      figure(
        part,
        "ingest, retention 100",
        hundred.okPerS,
        "req/s",
        undefined,
        `p99 ${hundred.latencyMs.p99.toFixed(1)} ms`,
      ),
      figure(
        part,
        `ingest, retention ${big.toLocaleString("en-US")}`,
        large100k.okPerS,
        "req/s",
        undefined,
        `p99 ${large100k.latencyMs.p99.toFixed(1)} ms; ${rate(large100k)}`,
      ),
      figure(
        part,
        `rate ${big.toLocaleString("en-US")} / 100`,
        (100 * large100k.okPerS) / hundred.okPerS,
        "%",
        {
          op: ">=",
          value: 90,
        },
      ),
      // The same comparison by CPU rather than rate: what each kept event costs the server, its
      // executors and PostgreSQL, which moves far less with the machine's other work than a rate does.
      figure(
        part,
        `CPU per hit, retention 100 / ${big.toLocaleString("en-US")}`,
        (100 * cpuPerHit(hundred)) / cpuPerHit(large100k),
        "%",
        undefined,
        `${(1e6 * cpuPerHit(hundred)).toFixed(0)} against ${(1e6 * cpuPerHit(large100k)).toFixed(0)} µs of server, executor and PostgreSQL CPU per hit`,
      ),
      figure(
        part,
        `ingest p99 while pruning ${pruned.toLocaleString("en-US")}`,
        whilePruning.p99,
        "ms",
        { op: "<=", value: 25 },
        `${steadyRate}/s offered; p50 ${whilePruning.p50.toFixed(1)} ms; p99 without pruning ${quiet.latencyMs.p99.toFixed(1)} ms; ` +
          `pruned to ${left} in ${pruneS.toFixed(1)} s (${((pruned - left) / pruneS).toFixed(0)} events/s)`,
      ),
      figure(
        part,
        "disk per stored event",
        perEvent,
        "bytes",
        undefined,
        `${stored.toLocaleString("en-US")} events of ~${payloadText.length + 10} bytes of JSON, filled at ${(stored / fillS).toFixed(0)}/s`,
      ),
    );
  } finally {
    await store.close();
  }
}
