/**
 * Is this working tree faster than another commit at live streams and manual runs? Starts a Fount
 * server from each (the other from a temporary git worktree, bench/lib/checkout.ts) and measures them
 * in alternation, so that the machine's drift falls on both alike (as bench/compare.ts does for ingest):
 *
 * - `sse`: `--clients` streams on one source of each server (four client processes each), then emits at
 *   `--rate`/s in slices of `--slice` s, A B B A …, the same load as the bench's `sse` part. Per server:
 *   emit-to-client percentiles over every slice, each slice's p99, events not received, and the server's
 *   CPU per event streamed to one client.
 * - `manual`: `--runs` sequential `POST /v1/sources/{id}/run` to each, alternating A B, B A, …
 *
 *   node bench/compare-live.ts [--base HEAD] [--part sse,manual] [--slices 6] [--slice 3]
 *                              [--clients 1000] [--rate 50] [--runs 400] [--node-args="…"]
 *
 * `--node-args` go to the working tree's server only (`--node-args="--cpu-prof --cpu-prof-dir=/tmp/p"`).
 */
import { parseArgs } from "node:util";
import { checkout } from "./lib/checkout.ts";
import { runLoad } from "./lib/load.ts";
import { cpuMeter, FountProcess, HelperChild, sleep, threadCpuSeconds } from "./lib/processes.ts";
import { SseAudience } from "./lib/sse-audience.ts";
import { type Distribution, distribution, percentile } from "./lib/stats.ts";
import { timedManualRun } from "./parts/api-latency.ts";
import { emitterCode, payload } from "./parts/context.ts";

const { values } = parseArgs({
  options: {
    base: { type: "string", default: "HEAD" },
    part: { type: "string", default: "sse,manual" },
    slices: { type: "string", default: "6" },
    slice: { type: "string", default: "3" },
    clients: { type: "string", default: "1000" },
    rate: { type: "string", default: "50" },
    runs: { type: "string", default: "400" },
    "node-args": { type: "string", default: "" },
  },
});
const parts = values.part.split(",").map((p) => p.trim());
const slices = Number(values.slices);
const sliceS = Number(values.slice);
const clients = Number(values.clients);
const rate = Number(values.rate);
const runs = Number(values.runs);
/** Client processes per server, as in the `sse` part. */
const clientProcesses = 4;

const base = checkout(values.base);
const names = [`base ${base.commit}`, "working tree"];
const servers: FountProcess[] = [];
const helpers: HelperChild[] = [];
const fmt = (d: Distribution) =>
  `p50 ${d.p50.toFixed(2)}  p90 ${d.p90.toFixed(1)}  p99 ${d.p99.toFixed(1)}  max ${d.max.toFixed(1)} ms`;

/** Alternating sse slices on both servers; prints each one's figures. */
async function sse(): Promise<void> {
  const targets = [];
  for (const server of servers) {
    const source = await server.deploy(emitterCode("compare-sse", true), "compare-sse");
    const children: HelperChild[] = [];
    for (let i = 0; i < clientProcesses; i++) children.push(await HelperChild.start("sse-clients.ts"));
    helpers.push(...children);
    const audience = await SseAudience.open(children, `${server.url}/sources/${source.id}/sse`, clients);
    if (audience.connected < clients) {
      throw new Error(`only ${audience.connected} of ${clients} streams opened: ${audience.openErrors}`);
    }
    targets.push({
      server,
      url: source.endpointUrl,
      audience,
      latencies: [] as number[],
      sliceP99: [] as number[],
      delivered: 0,
      expected: 0,
      /** Streams closed by the server meanwhile (a client dropped for falling behind). */
      closed: 0,
      cpuS: 0,
    });
  }
  const bodyOf = () => JSON.stringify({ ...payload, sent_at: Date.now() });
  const load = (url: string, durationS: number) =>
    runLoad({ url, body: bodyOf(), bodyOf, connections: 5, durationS, overallRate: rate });
  for (const t of targets) {
    await load(t.url, 2);
    await t.audience.awaitFanOut(1, 5_000);
  }
  await sleep(500);
  for (let i = 0; i < slices; i++) {
    for (const t of i % 2 === 0 ? targets : [...targets].reverse()) {
      await t.audience.reset();
      const meter = cpuMeter(t.server.pid);
      const l = await load(t.url, sliceS);
      await t.audience.awaitFanOut(l.ok, 3_000);
      // Emits of requests cut off at the end land a moment later.
      await sleep(300);
      const r = await t.audience.report();
      t.cpuS += meter().serverS;
      for (const ms of r.emitLatencies) t.latencies.push(ms);
      t.sliceP99.push(distribution(r.emitLatencies).p99);
      t.delivered += r.received.reduce((a, b) => a + b, 0);
      t.expected += Math.max(l.ok, ...r.received) * t.audience.connected;
      t.closed = r.clients - r.open;
    }
  }
  const d = targets.map((t) => distribution(t.latencies));
  targets.forEach((t, i) => {
    console.log(
      `sse    ${names[i]!.padEnd(14)} emit-to-client ${fmt(d[i]!)}; slice p99s ${t.sliceP99.join(" ")}; ` +
        `${t.expected - t.delivered} of ${t.expected} not received (${t.closed} streams closed); ` +
        `${((1e6 * t.cpuS) / t.delivered).toFixed(1)} µs server CPU per event streamed`,
    );
  });
  console.log(
    `sse    working tree / base: p50 ${(d[1]!.p50 / d[0]!.p50).toFixed(3)}, p99 ${(d[1]!.p99 / d[0]!.p99).toFixed(3)}, ` +
      `CPU per event ${(targets[1]!.cpuS / targets[1]!.delivered / (targets[0]!.cpuS / targets[0]!.delivered)).toFixed(3)}`,
  );
  for (const t of targets) await t.audience.close();
}

/** Alternating manual runs on both servers; prints each one's figures. */
async function manual(): Promise<void> {
  const sources: string[] = [];
  for (const server of servers) {
    const source = await server.deploy(emitterCode("compare-manual", false), "compare-manual");
    for (let i = 0; i < 20; i++) await timedManualRun(server, source.id);
    sources.push(source.id);
  }
  const times: number[][] = servers.map(() => []);
  const order = servers.map((_, i) => i);
  // Each server works only on its own runs (and idles through the other's), so its CPU over the whole
  // phase, executors included, is its cost of that many runs.
  const meters = servers.map((s) => cpuMeter(s.pid));
  // The server's main thread alone (HTTP, the store, the pool), where the HTTP side's cost shows.
  const mainThread = (pid: number) =>
    [...threadCpuSeconds(pid)].find(([name]) => name.endsWith("*"))?.[1] ?? Number.NaN;
  const main0 = servers.map((s) => mainThread(s.pid));
  for (let i = 0; i < runs; i++) {
    for (const t of i % 2 === 0 ? order : [...order].reverse()) {
      times[t]!.push(await timedManualRun(servers[t]!, sources[t]!));
    }
  }
  const cpu = meters.map((m) => m().serverS);
  const mainCpu = servers.map((s, i) => mainThread(s.pid) - main0[i]!);
  const d = times.map((t) => distribution(t));
  // The fastest runs are what an idle core would give: on a loaded machine the p50 waits for the CPU.
  const p10 = times.map((t) => percentile(Float64Array.from(t).sort(), 10));
  for (const [i, x] of d.entries()) {
    console.log(
      `manual ${names[i]!.padEnd(14)} p10 ${p10[i]!.toFixed(2)}  ${fmt(x)} (${x.count} runs); ${((1e6 * cpu[i]!) / x.count).toFixed(0)} µs server CPU per run, ${((1e6 * mainCpu[i]!) / x.count).toFixed(0)} µs of it on its main thread`,
    );
  }
  console.log(
    `manual working tree / base: p10 ${(p10[1]! / p10[0]!).toFixed(3)}, p50 ${(d[1]!.p50 / d[0]!.p50).toFixed(3)}, ` +
      `p99 ${(d[1]!.p99 / d[0]!.p99).toFixed(3)}, CPU per run ${(cpu[1]! / d[1]!.count / (cpu[0]! / d[0]!.count)).toFixed(3)}, ` +
      `main thread ${(mainCpu[1]! / d[1]!.count / (mainCpu[0]! / d[0]!.count)).toFixed(3)}`,
  );
}

try {
  servers.push(await FountProcess.start({ root: base.root }));
  servers.push(await FountProcess.start({ nodeArgs: values["node-args"].split(" ").filter(Boolean) }));
  if (parts.includes("sse")) await sse();
  if (parts.includes("manual")) await manual();
} finally {
  for (const helper of helpers) await helper.stop();
  for (const server of servers) await server.stop();
  base.remove();
}
// Keep-alive sockets of the bench's own client must not hold the process open.
process.exit();
