/**
 * Three nodes against one, each node capped at 0.4 CPU (issue 29, point 3): on this 2-core machine an
 * uncapped node already takes most of the cores, so three nodes could only share them; with a CFS quota
 * per node (a cgroup v1 `cpu` group each, its executors in it too; the load generator and PostgreSQL
 * outside) the ratio shows what more nodes add, as on a cluster of separate machines. The groups, and
 * the load generator's own group without a quota, weigh more than the machine's other processes
 * (bench/lib/cgroups.ts), so that other work on the machine slows them less; PostgreSQL, shared with
 * that work, is left alone.
 *
 * Loads, each 30 emitter sources on one PostgreSQL schema at the HTTP part's 50 connections:
 * - one capped node, every source's hits through it;
 * - three capped nodes, *spread*: each source's hits through one node (node i gets every third source);
 * - three capped nodes, *every node*: every source's hits through every node (a load balancer that does
 *   not look at paths; a hit reaching a node that does not run its source is forwarded);
 * - three capped nodes *warmed through one node*: a fresh cluster whose first node alone gets every
 *   source's hits for the warm-up (before placement it took every lease and kept them), then the spread
 *   load: its first `--duration` seconds at once (reported on their own: the leases move and the other
 *   nodes start their executors), then as the others.
 * Each load is warmed up until its rate is steady (`warmUntilSteady`) before it is measured. The first
 * three go in alternating slices; the warmed cluster then alternates with the one node again.
 */
import os from "node:os";
import {
  cpuGroup,
  cpuGroupsAvailable,
  joinGroup,
  leaveGroups,
  removeGroup,
  throttledSeconds,
} from "../lib/cgroups.ts";
import { type InterleavedResult, interleavedLoads, type LoadTarget } from "../lib/interleave.ts";
import { runSpread } from "../lib/load.ts";
import type { FountProcess } from "../lib/processes.ts";
import { type Figure, figure } from "../lib/report.ts";
import { deployEmitters, legs, loadAverageFigure, note, rotate } from "./cluster.ts";
import { type PartContext, payloadText } from "./context.ts";

const part = "Cluster, capped";
/** Each node's CPU quota. */
const cpusPerNode = 0.4;
const clusterNodes = 3;
const sources = 30;
const sliceS = 2;
/** A warm-up's slices (s), and how long it may go on before the measurement starts anyway. */
const warmSliceS = 2;
const warmMaxS = 30;

/**
 * Warms a load up until its rate is steady: slices of `warmSliceS` (at least `minS` in all) until two in
 * a row rose by less than a tenth, or `warmMaxS`; returns each slice's rate. At 0.4 CPU a fresh node
 * spends its first seconds compiling and starting executors: with a fixed 3 s warm-up every load's
 * measured slices still climbed (one node 242 to 707/s, three spread 163 to 2,108/s within 10 s), so
 * the ratios compared warm-ups, not nodes.
 */
async function warmUntilSteady(
  target: LoadTarget,
  connections: number,
  minS: number,
): Promise<{ rates: number[]; ok: number }> {
  const rates: number[] = [];
  let ok = 0;
  for (let elapsed = 0; elapsed < warmMaxS; elapsed += warmSliceS) {
    const r = await runSpread(target.url as Exclude<LoadTarget["url"], string>, {
      body: payloadText,
      connections,
      durationS: warmSliceS,
    });
    rates.push(Math.round(r.ok / r.durationS));
    ok += r.ok;
    const n = rates.length;
    const rose = (i: number) => rates[i]! > 1.1 * rates[i - 1]!;
    if (elapsed + warmSliceS >= minS && n >= 3 && !rose(n - 1) && !rose(n - 2)) break;
  }
  return { rates, ok };
}

interface Setup {
  servers: FountProcess[];
  paths: string[];
  groups: string[];
}

export async function clusterCapped(
  ctx: PartContext,
  out: { figures: Figure[]; details: Record<string, unknown> },
) {
  if (!cpuGroupsAvailable())
    throw new Error("cluster-capped needs cgroup v1 `cpu` writable at /sys/fs/cgroup/cpu (run as root)");
  const { durationS, warmupS, connections, pgUrl } = ctx.settings;
  const loadBefore = os.loadavg();
  let groupCount = 0;
  const group = () => {
    const dir = cpuGroup(`fount-bench-${process.pid}-${++groupCount}`, cpusPerNode);
    ctx.defer(() => removeGroup(dir));
    return dir;
  };
  // The load generator (this process) in a group of the bench's weight without a quota, back at the end.
  const loadGroup = cpuGroup(`fount-bench-${process.pid}-load`, undefined);
  joinGroup(loadGroup, process.pid);
  ctx.defer(() => {
    leaveGroups(process.pid);
    removeGroup(loadGroup);
  });
  ctx.log(`${part}: 1 node and ${clusterNodes} nodes, ${cpusPerNode} CPU each, on PostgreSQL`);
  const oneGroup = group();
  const one: Setup = {
    servers: [await ctx.fount({ driver: "postgres", url: pgUrl }, {}, oneGroup)],
    paths: [],
    groups: [oneGroup],
  };
  const spreadGroups = Array.from({ length: clusterNodes }, group);
  const three: Setup = {
    servers: await ctx.cluster(clusterNodes, pgUrl, spreadGroups),
    paths: [],
    groups: spreadGroups,
  };
  one.paths = await deployEmitters(one.servers[0]!, "capped-one", sources);
  three.paths = await deployEmitters(three.servers[0]!, "capped-three", sources);
  const share = sources / clusterNodes;
  const pids = (s: Setup) => s.servers.map((f) => f.pid);
  const oneTarget: LoadTarget = { url: legs(one, () => one.paths), pid: pids(one) };
  const spreadTarget = (s: Setup): LoadTarget => ({
    url: legs(s, (i) => s.paths.filter((_, j) => j % clusterNodes === i)),
    pid: pids(s),
  });
  const everyTarget: LoadTarget = {
    url: legs(three, (i) => rotate(three.paths, i * share)),
    pid: pids(three),
  };
  const targets = [oneTarget, spreadTarget(three), everyTarget];
  const labels = ["1 node", `${clusterNodes} spread`, `${clusterNodes} every node`];

  const warmUps: Record<string, number[]> = {};
  for (const [i, t] of targets.entries()) {
    const rates = (await warmUntilSteady(t, connections, warmupS)).rates;
    warmUps[labels[i]!] = rates;
    ctx.log(`${part}: warm-up of ${labels[i]}, ${warmSliceS} s slices: ${rates.join(" ")}/s`);
  }
  const slices = Math.max(1, Math.round(durationS / sliceS));
  const committedBefore = await Promise.all([one, three].map((s) => s.servers[0]!.invocationsCommitted()));
  const throttledBefore = [...one.groups, ...three.groups].map(throttledSeconds);
  ctx.log(
    `${part}: 1 node, ${clusterNodes} spread, ${clusterNodes} every node: ${slices} alternating ${sliceS} s slices each`,
  );
  const [oneR, spreadR, everyR] = (await interleavedLoads(targets, {
    body: payloadText,
    connections,
    slices,
    sliceS,
  })) as [InterleavedResult, InterleavedResult, InterleavedResult];
  const throttled = [...one.groups, ...three.groups].map((g, i) => throttledSeconds(g) - throttledBefore[i]!);

  // The warmed cluster: a fresh one whose first node alone gets every source's hits for the warm-up.
  ctx.log(`${part}: a fresh cluster of ${clusterNodes}, warmed up through its first node`);
  const warmGroups = Array.from({ length: clusterNodes }, group);
  const warmed: Setup = {
    servers: await ctx.cluster(clusterNodes, pgUrl, warmGroups),
    paths: [],
    groups: warmGroups,
  };
  const first = warmed.servers[0]!;
  warmed.paths = await deployEmitters(first, "capped-warm", sources);
  // Every source once first: autocannon's connections all start at the first path, and at 0.4 CPU a
  // short warm-up may not reach the last ones.
  await Promise.all(
    warmed.paths.map((p) =>
      fetch(`${first.endpoints}${p}`, { method: "POST", body: payloadText }).then((r) => r.arrayBuffer()),
    ),
  );
  await runSpread([{ url: first.endpoints, paths: warmed.paths }], {
    body: payloadText,
    connections,
    durationS: warmupS,
  });
  const held = async () =>
    ((await first.api("GET", "/v1/admin/nodes")).data as Array<{ id: string; sources: number }>).map(
      (n) => `${n.id.slice(0, n.id.indexOf("/"))} ${n.sources}`,
    );
  const heldBefore = await held();
  const forwarded = async () =>
    (await Promise.all(warmed.servers.map((s) => s.forwardedHits()))).reduce((a, b) => a + b, 0);
  const warmedCommittedBefore = await first.invocationsCommitted();
  // The spread load at once, while the leases move and the other two nodes start their executors and
  // compile; then until its rate is steady, as every other load here is before it is measured.
  const warmedTarget = spreadTarget(warmed);
  const transition = await runSpread(warmedTarget.url as Exclude<LoadTarget["url"], string>, {
    body: payloadText,
    connections,
    durationS,
  });
  const warmedWarmUp = await warmUntilSteady(warmedTarget, connections, warmupS);
  warmUps.warmed = warmedWarmUp.rates;
  ctx.log(`${part}: warm-up of the warmed cluster's spread load: ${warmedWarmUp.rates.join(" ")}/s`);
  const heldSettled = await held();
  const forwardedBefore = await forwarded();
  const [warmR, oneAgainR] = (await interleavedLoads([warmedTarget, oneTarget], {
    body: payloadText,
    connections,
    slices,
    sliceS,
  })) as [InterleavedResult, InterleavedResult];
  const heldAfter = await held();
  const warmedForwarded = (await forwarded()) - forwardedBefore;
  await new Promise((r) => setTimeout(r, 1_000));
  const committed = [
    (await one.servers[0]!.invocationsCommitted()) - committedBefore[0]!,
    (await three.servers[0]!.invocationsCommitted()) - committedBefore[1]!,
    (await first.invocationsCommitted()) - warmedCommittedBefore,
  ];
  const loadAfter = os.loadavg();
  out.details = {
    one: oneR,
    spread: spreadR,
    everyNode: everyR,
    warmed: warmR,
    oneAgain: oneAgainR,
    throttledS: throttled,
    warmedLeases: { before: heldBefore, settled: heldSettled, after: heldAfter },
    warmUps,
    transition: { ok: transition.ok, durationS: transition.durationS },
    warmedForwarded,
    loadAverage: { before: loadBefore, after: loadAfter },
  };

  const rate = (r: InterleavedResult, label: string) =>
    figure(part, `${label}: acknowledged emits/s`, r.okPerS, "req/s", undefined, note(r));
  out.figures.push(
    rate(oneR, `1 node, ${sources} sources`),
    rate(spreadR, `${clusterNodes} nodes, ${sources} sources spread`),
    rate(everyR, `${clusterNodes} nodes, every source through every node`),
    rate(warmR, `${clusterNodes} nodes warmed through one, then spread`),
    rate(oneAgainR, `1 node, ${sources} sources (alternating with the warmed cluster)`),
  );
  const ratio = (r: InterleavedResult, base: InterleavedResult, label: string, target: number) =>
    figure(
      part,
      label,
      r.okPerS / base.okPerS,
      "×",
      { op: ">=", value: target },
      `${Math.round(r.okPerS).toLocaleString("en-US")} against ${Math.round(base.okPerS).toLocaleString("en-US")}/s, ${cpusPerNode} CPU per node`,
    );
  out.figures.push(
    ratio(spreadR, oneR, `${clusterNodes} nodes / 1 node, ${sources} sources spread`, 2.5),
    ratio(everyR, oneR, `${clusterNodes} nodes / 1 node, every node`, 2.5),
    ratio(warmR, oneAgainR, `${clusterNodes} nodes / 1 node, warmed through one node`, 2.2),
    figure(
      part,
      `${clusterNodes} nodes / 1 node, the first ${durationS} s after the warm-up through one node`,
      transition.ok / transition.durationS / oneAgainR.okPerS,
      "×",
      undefined,
      `${Math.round(transition.ok / transition.durationS).toLocaleString("en-US")}/s while the leases moved and the other nodes warmed up, before the warmed cluster's own warm-up (${warmedWarmUp.rates.join(" ")}/s) and its measured slices`,
    ),
    figure(
      part,
      "warmed cluster's leases per node",
      Number(heldAfter.length),
      "nodes",
      undefined,
      `after the warm-up through the first node: ${heldBefore.join(", ")}; before the measured slices: ${heldSettled.join(", ")}; after them: ${heldAfter.join(", ")}`,
    ),
    figure(
      part,
      "warmed cluster's hits forwarded to another node",
      (100 * warmedForwarded) / Math.max(1, warmR.ok),
      "%",
      undefined,
      `${warmedForwarded.toLocaleString("en-US")} of ${warmR.ok.toLocaleString("en-US")} acknowledged hits (the spread load sends each source's hits through one node; leases follow them)`,
    ),
  );
  const acknowledged = [
    oneR.ok + oneAgainR.ok,
    spreadR.ok + everyR.ok,
    warmR.ok + transition.ok + warmedWarmUp.ok,
  ];
  for (const [i, label] of ["1 node", `${clusterNodes} nodes`, `${clusterNodes} nodes warmed`].entries()) {
    out.figures.push(
      figure(
        part,
        `acknowledged but not stored, ${label}`,
        Math.max(0, acknowledged[i]! - committed[i]!),
        "events",
        { op: "<=", value: 0 },
        `${committed[i]!.toLocaleString("en-US")} runs committed (usage counter) for ${acknowledged[i]!.toLocaleString("en-US")} 200s`,
      ),
    );
  }
  out.figures.push(
    loadAverageFigure(
      part,
      loadBefore,
      loadAfter,
      `; throttled ${throttled.map((t) => t.toFixed(1)).join(" / ")} s (1 node / 3 nodes)`,
    ),
  );
}
