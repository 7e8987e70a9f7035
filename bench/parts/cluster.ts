/**
 * Several nodes on one PostgreSQL (issue 16): the HTTP part's load (50 connections, a 200-byte JSON
 * body, a 200 only once the emit is committed) against one node on SQLite, one node on PostgreSQL and
 * three nodes on one PostgreSQL schema, the last with the connections split over the three, all in
 * alternating slices so that every figure comes from the same minutes.
 *
 * The invocations of a source run on the node holding its run lease (src/domain/cluster/source-leases.ts), so
 * with one hot source hit through every node the lease moves between the nodes all the time. A cluster
 * serves many sources, each of which needs its lease on one node at a time: the part measures both
 * loads, one hot source and hits spread over 30 sources, and the latter also with the hits of each
 * source sent to one node (what a load balancer routing by endpoint path would do).
 */
import os from "node:os";
import { type InterleavedResult, interleavedLoads, type LoadTarget } from "../lib/interleave.ts";
import { type Leg, runSpread } from "../lib/load.ts";
import { cpuMeter, type FountProcess, sleep } from "../lib/processes.ts";
import { type Figure, figure } from "../lib/report.ts";
import { emitterCode, type PartContext, payloadText } from "./context.ts";

const part = "Cluster";
/** Seconds of each alternating slice, as in the HTTP part. */
const sliceS = 2;
/** Nodes of the cluster measured: the three-node run. */
const clusterNodes = 3;
/** Sources of the spread load: enough that every node always has some whose lease it holds. */
const spreadSources = 30;
/** Seconds over which the setups' CPU is measured without load. */
const idleS = 5;
/** Deploys in flight at once while setting up (31 sources per setup). */
const deployBatch = 8;

interface Setup {
  label: string;
  servers: FountProcess[];
  /** Endpoint path of the one hot source. */
  hot: string;
  /** Endpoint paths of the spread load's sources. */
  spread: string[];
}

interface Load {
  label: string;
  setup: Setup;
  target: LoadTarget;
  /** The one-node target (≥ 8,000/s, p99 ≤ 25 ms) applies. */
  oneNodeTarget: boolean;
}

/** Deploys `count` emitter sources through `server`; returns their endpoint paths. */
export async function deployEmitters(server: FountProcess, prefix: string, count: number): Promise<string[]> {
  const paths: string[] = [];
  for (let i = 0; i < count; i += deployBatch) {
    const batch = Array.from({ length: Math.min(deployBatch, count - i) }, (_, j) =>
      server.deploy(emitterCode(`${prefix}-${i + j}`, false), `${prefix}-${i + j}`),
    );
    for (const source of await Promise.all(batch)) {
      const url = new URL(source.endpointUrl);
      paths.push(url.pathname + url.search);
    }
  }
  return paths;
}

/** `list` starting at `from`, so that the nodes' load generators do not start on the same source. */
export function rotate<T>(list: T[], from: number): T[] {
  return [...list.slice(from), ...list.slice(0, from)];
}

/** The legs of a load: the connections split over the setup's servers. */
export function legs(
  setup: { servers: FountProcess[] },
  paths: (node: number) => string[] | undefined,
  hotPath?: string,
): Leg[] {
  return setup.servers.map((server, i) => ({ url: server.endpoints + (hotPath ?? ""), paths: paths(i) }));
}

export async function cluster(
  ctx: PartContext,
  out: { figures: Figure[]; details: Record<string, unknown> },
) {
  const { durationS, warmupS, connections, pgUrl } = ctx.settings;
  const loadBefore = os.loadavg();
  ctx.log(`${part}: one node on SQLite, one on PostgreSQL, ${clusterNodes} on one PostgreSQL schema`);
  const groups: Array<[string, FountProcess[]]> = [
    ["SQLite, 1 node", [await ctx.fount({ driver: "sqlite" })]],
    ["PostgreSQL, 1 node", [await ctx.fount({ driver: "postgres", url: pgUrl })]],
    [`PostgreSQL, ${clusterNodes} nodes`, await ctx.cluster(clusterNodes, pgUrl)],
  ];
  const setups: Setup[] = [];
  for (const [label, servers] of groups) {
    // Deployed through the first node; every node serves every source.
    const [hot] = await deployEmitters(servers[0]!, "bench-cluster-hot", 1);
    const spread = await deployEmitters(servers[0]!, "bench-cluster", spreadSources);
    setups.push({ label, servers, hot: hot!, spread });
  }
  const [, pgOne, pgCluster] = setups as [Setup, Setup, Setup];
  const pids = (s: Setup) => s.servers.map((f) => f.pid);
  const share = spreadSources / clusterNodes;

  const loads: Load[] = [];
  for (const setup of setups) {
    loads.push({
      label: `1 hot source, ${setup.label}`,
      setup,
      target: { url: legs(setup, () => undefined, setup.hot), pid: pids(setup) },
      oneNodeTarget: setup === pgOne,
    });
  }
  for (const setup of setups) {
    loads.push({
      label: `${spreadSources} sources, ${setup.label}`,
      setup,
      // Every node gets hits of every source, as from a load balancer that does not look at paths.
      target: { url: legs(setup, (i) => rotate(setup.spread, i * share)), pid: pids(setup) },
      oneNodeTarget: setup === pgOne,
    });
  }
  loads.push({
    label: `${spreadSources} sources, ${pgCluster.label}, routed`,
    setup: pgCluster,
    // Node i gets only the hits of every third source: routed by endpoint path.
    target: {
      url: legs(pgCluster, (i) => pgCluster.spread.filter((_, j) => j % clusterNodes === i)),
      pid: pids(pgCluster),
    },
    oneNodeTarget: false,
  });

  // What the setups' servers use with no load at all (heartbeats, pollers, LISTEN): on two cores, three
  // nodes' share of it comes out of what serves the hits.
  ctx.log(`${part}: ${idleS} s without load`);
  const idleMeters = setups.map((s) => cpuMeter(pids(s)));
  await sleep(idleS * 1_000);
  const idleCpuS = idleMeters.map((meter) => meter().serverS);

  ctx.log(`${part}: warm-up ${warmupS} s for each of ${loads.length} loads`);
  for (const load of loads) {
    const target = load.target;
    await runSpread(typeof target.url === "string" ? [{ url: target.url }] : target.url, {
      body: payloadText,
      connections,
      durationS: warmupS,
    });
  }

  // Requests cut off when the last warm-up stopped may still commit: let them land before counting.
  await sleep(1_000);
  const committedBefore = await Promise.all(setups.map((s) => s.servers[0]!.invocationsCommitted()));
  const slices = Math.max(1, Math.round(durationS / sliceS));
  ctx.log(
    `${part}: ${loads.length} loads in alternating ${sliceS} s slices, ${slices} each, at ${connections} connections`,
  );
  const results = await interleavedLoads(
    loads.map((l) => l.target),
    { body: payloadText, connections, slices, sliceS },
  );
  // Requests cut off when a slice stopped may still commit: let them land before counting.
  await sleep(1_000);
  const committed = await Promise.all(
    setups.map(async (s, i) => (await s.servers[0]!.invocationsCommitted()) - committedBefore[i]!),
  );
  const loadAfter = os.loadavg();
  out.details.loads = loads.map((l, i) => ({ label: l.label, result: results[i] }));
  out.details.committed = setups.map((s, i) => ({ setup: s.label, committed: committed[i] }));
  out.details.loadAverage = { before: loadBefore, after: loadAfter };

  const rate = (l: Load) => results[loads.indexOf(l)]!;
  for (const [i, load] of loads.entries()) {
    const r = results[i]!;
    out.figures.push(
      figure(
        part,
        `${load.label}: acknowledged emits/s`,
        r.okPerS,
        "req/s",
        load.oneNodeTarget ? { op: ">=", value: 8_000 } : undefined,
        note(r),
      ),
      figure(
        part,
        `${load.label}: latency p50`,
        r.latencyMs.p50,
        "ms",
        undefined,
        `${connections} connections`,
      ),
      figure(
        part,
        `${load.label}: latency p99`,
        r.latencyMs.p99,
        "ms",
        load.oneNodeTarget ? { op: "<=", value: 25 } : undefined,
        `max ${r.latencyMs.max.toFixed(1)} ms`,
      ),
    );
  }
  const ratio = (cluster: Load, one: Load, sqliteOne: Load, name: string) =>
    figure(
      part,
      name,
      rate(cluster).okPerS / rate(one).okPerS,
      "×",
      { op: ">=", value: 1 },
      `${Math.round(rate(cluster).okPerS).toLocaleString("en-US")} against ${Math.round(rate(one).okPerS).toLocaleString("en-US")}/s; ` +
        `${(rate(cluster).okPerS / rate(sqliteOne).okPerS).toFixed(2)} of SQLite's one node`,
    );
  const [hotSqlite, hotOne, hotCluster, spreadSqlite, spreadOne, spreadCluster, routed] = loads as [
    Load,
    Load,
    Load,
    Load,
    Load,
    Load,
    Load,
  ];
  out.figures.push(
    ratio(hotCluster, hotOne, hotSqlite, `${clusterNodes} nodes / 1 node, 1 hot source`),
    ratio(spreadCluster, spreadOne, spreadSqlite, `${clusterNodes} nodes / 1 node, ${spreadSources} sources`),
    figure(
      part,
      `${clusterNodes} nodes routed / 1 node, ${spreadSources} sources`,
      rate(routed).okPerS / rate(spreadOne).okPerS,
      "×",
      undefined,
      "each source's hits through one node",
    ),
  );
  for (const [i, setup] of setups.entries()) {
    const mine = loads.flatMap((l, j) => (l.setup === setup ? [results[j]!] : []));
    const ok = mine.reduce((a, r) => a + r.ok, 0);
    // Each slice cut off at its end may add up to one run per connection.
    const bound = mine.reduce((a, r) => a + connections * slices + r.non2xx + r.errors + r.timeouts, 0);
    const done = committed[i]!;
    out.figures.push(
      figure(
        part,
        `acknowledged but not stored, ${setup.label}`,
        Math.max(0, ok - done),
        "events",
        { op: "<=", value: 0 },
        `${done.toLocaleString("en-US")} runs committed (usage counter) for ${ok.toLocaleString("en-US")} 200s` +
          ` (surplus ≤ ${bound} expected: ${done - ok <= bound ? "yes" : "NO"})`,
      ),
    );
  }
  for (const [i, setup] of setups.entries()) {
    out.figures.push(
      figure(
        part,
        `server CPU without load, ${setup.label}`,
        (100 * idleCpuS[i]!) / idleS,
        "% of a core",
        undefined,
        `over ${idleS} s, before the warm-up`,
      ),
    );
  }
  out.figures.push(loadAverageFigure(part, loadBefore, loadAfter));
}

/** The machine's load average before and after a part, with `more` said after it. */
export function loadAverageFigure(part: string, before: number[], after: number[], more = ""): Figure {
  return figure(
    part,
    "load average (1 min), before / after",
    before[0]!,
    "",
    undefined,
    `after ${after[0]!.toFixed(2)}; ${os.cpus().length} CPUs${more}`,
  );
}

export function note(r: InterleavedResult): string {
  const perNode =
    r.legOk.length > 1 ? `; per node ${r.legOk.map((n) => n.toLocaleString("en-US")).join(" / ")}` : "";
  return (
    `${r.ok.toLocaleString("en-US")} ok, ${r.non2xx} non-2xx, ${r.errors} errors in ${r.durationS.toFixed(1)} s${perNode}; ` +
    `slices ${r.sliceRates.join(" ")}; server CPU ${r.cpu.serverS.toFixed(1)} s (${Math.round((1e6 * r.cpu.serverS) / r.ok)} µs per hit), ` +
    `other ${r.cpu.otherS.toFixed(1)} s`
  );
}
