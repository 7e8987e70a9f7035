/**
 * What a tenant costs (issue 29, point 5): anonymous memory and PSS of each owner's executor with 50
 * tenants active (one source each, one hit per second each), a tenant's first hit when its executor is
 * not running (stopped for being idle: `FOUNT_EXECUTOR_IDLE_S`), and `--tenants` tenants (1,000 by
 * default) active on one node with the memory of the whole server, and how many tenants 24 GB would
 * hold at the memory per tenant measured (a linear extrapolation when `--tenants` is under 1,000, said
 * so in the figure). Executor settings reach the server from the bench's environment
 * (`FOUNT_EXECUTOR_V8_FLAGS=--optimize-for-size npm run bench -- --only tenants`). Memory is read from
 * `/proc/<pid>/smaps_rollup`: `Anonymous` is what a process holds of its own, `Pss` adds its share of
 * the pages it maps with others (Node's binary, mostly).
 */
import { readdirSync, readFileSync } from "node:fs";
import os from "node:os";
import { ownerFolderName } from "../../src/runtime/bundle-layout.ts";
import { httpCall } from "../lib/http-client.ts";
import {
  childPids,
  type FountProcess,
  type Memory,
  ownCpuSeconds,
  readProcStats,
  memoryOf as rollup,
} from "../lib/processes.ts";
import { type Figure, figure } from "../lib/report.ts";
import { distribution, percentile } from "../lib/stats.ts";
import { emitterCode, type PartContext, payload } from "./context.ts";

/** Before this work (docs/architecture.md, issue 29): an executor with one source, 50 tenants active. */
const before = { anonMb: 28.1, pssMb: 28.7, firstHitMs: 174 };
/** The bundle folder of the registry's own executor (owner `registryOwner` of src/domain/components/components.ts). */
const registryFolder = ownerFolderName("registry");
/** The memory target for 1,000 active tenants on one node (issue 29). */
const NODE_BUDGET_GB = 24;
/**
 * The many-tenants run deploys no more tenants than the memory available after the 50-tenant run holds
 * at that run's PSS per active executor (plus a tenth), keeping `MEMORY_FLOOR_MB` free, and its hits
 * stop if the machine still falls under that floor: 1,000 tenants at today's executor size need more
 * than 24 GB once each has had its hits (an executor grows by about 8 MB from its deploy to its first
 * runs), and on a 24 GB machine the kernel's OOM killer then ends the server and the run with it
 * (bench/lib/processes.ts makes the server its first choice). The tenants deployed are measured, and the
 * figures say memory ran short.
 */
const MEMORY_FLOOR_MB = Math.max(1536, (os.totalmem() / 2 ** 20) * 0.08);

/** `MemAvailable` of /proc/meminfo, in MB (Infinity where there is no such file). */
function memoryAvailableMb(): number {
  try {
    const kb = /^MemAvailable:\s+(\d+) kB/m.exec(readFileSync("/proc/meminfo", "utf8"))?.[1];
    return kb === undefined ? Number.POSITIVE_INFINITY : Number(kb) / 1024;
  } catch {
    return Number.POSITIVE_INFINITY;
  }
}

/** Idle time after which the first-hit figure's executors are stopped (FOUNT_EXECUTOR_IDLE_S). */
export const IDLE_S = 3;

export interface Tenant {
  key: string;
  endpointUrl: string;
}

/**
 * The server's executor processes (children running runner.mjs), the registry's own and spares no owner
 * took yet (FOUNT_EXECUTOR_SPARES: a spare's folder, named in its command line, is empty until an owner
 * takes it) left out.
 */
export function executorPids(serverPid: number): number[] {
  return childPids(serverPid).filter((pid) => {
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
      if (!/runner\.(mjs|ts)/.test(cmdline) || cmdline.includes("/scratch/registry")) return false;
      const spare = /--allow-fs-read=([^\0]*\/spares\/\d+)\0/.exec(cmdline)?.[1];
      if (spare === undefined) return true;
      // A taken spare's folder links its owner's folders (src/runtime/executors/spares.ts).
      const links = readdirSync(spare, { recursive: true }).map(String);
      return links.length > 0 && !links.some((l) => l.endsWith(`/owners/${registryFolder}`));
    } catch {
      return false;
    }
  });
}

function sum(items: Memory[]): Memory {
  const total = { anonMb: 0, pssMb: 0, rssMb: 0 };
  for (const m of items) {
    total.anonMb += m.anonMb;
    total.pssMb += m.pssMb;
    total.rssMb += m.rssMb;
  }
  return total;
}

/** Creates `count` users, each with one HTTP source, a few at a time; none more once `stop()` says so. */
export async function tenants(
  fount: FountProcess,
  count: number,
  log: (m: string) => void,
  stop: () => boolean = () => false,
): Promise<Tenant[]> {
  const out: Tenant[] = [];
  const code = emitterCode("bench-tenant", false);
  let next = 0;
  const worker = async () => {
    while (next < count && !stop()) {
      const i = next++;
      const user = await fount.api("POST", "/v1/admin/users", {
        username: `tenant-${i}-${Date.now()}`,
        email: `tenant-${i}@example.com`,
      });
      const key: string = user.data.api_key;
      const res = await httpCall(`${fount.url}/v1/sources`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}` },
        json: { component_code: code, name: `tenant-${i}` },
        timeoutMs: 120_000,
      });
      if (res.status !== 200 && res.status !== 201)
        throw new Error(`deploy answered ${res.status}: ${res.text.slice(0, 200)}`);
      const endpointUrl: string = res.json.data.endpoint_url;
      // A test event right after the deploy, as a user sends one: it starts the source's realm now (the
      // deploy's own, docs/isolation.md), not all of them at once in the first second of the hits, where
      // hundreds of realm starts (about 100 ms of CPU each) made the hits' latency that of a queue.
      const first = await httpCall(endpointUrl, { method: "POST", json: payload, timeoutMs: 120_000 });
      if (first.status !== 200)
        throw new Error(`first hit answered ${first.status}: ${first.text.slice(0, 200)}`);
      out.push({ key, endpointUrl });
      if (out.length % 100 === 0) log(`Tenants: ${out.length} of ${count} deployed`);
    }
  };
  await Promise.all(Array.from({ length: 4 }, worker));
  return out;
}

/** CPU seconds of the server's own threads and of its tenants' executors, from /proc. */
interface CpuMark {
  server: number;
  executors: number;
}

function cpuMark(serverPid: number, pids: number[]): CpuMark {
  const stats = readProcStats();
  let executors = 0;
  for (const pid of pids) executors += ownCpuSeconds(pid, stats);
  return { server: ownCpuSeconds(serverPid, stats), executors };
}

/** The server's and the executors' CPU per hit (µs) over the hits sent between two marks. */
export interface CpuPerHit {
  serverUs: number;
  executorUs: number;
  hits: number;
}

/**
 * Hits each tenant's endpoint once per second, spread over the second, for `seconds`, or until `stop()`
 * says so (asked every 50 hits). With `cpu`, the CPU per hit of the server and of the executors `cpu`
 * names, over the hits sent from the first third of the run (at most 10 s: what a deploy leaves to do
 * settles first) to its last.
 */
async function hitEverySecond(
  list: Tenant[],
  seconds: number,
  stop: () => boolean = () => false,
  cpu?: { serverPid: number; pids: () => number[] },
): Promise<{ ms: number[]; failed: number; stopped: boolean; cpu?: CpuPerHit }> {
  const ms: number[] = [];
  let failed = 0;
  let stopped = false;
  const start = performance.now();
  const calls: Promise<void>[] = [];
  const markAt = Math.min(10, Math.floor(seconds / 3));
  let pids: number[] = [];
  let first: CpuMark | undefined;
  let sent = 0;
  for (let s = 0; s < seconds && !stopped; s++) {
    if (cpu && s === markAt) {
      pids = cpu.pids();
      first = cpuMark(cpu.serverPid, pids);
      sent = 0;
    }
    for (let i = 0; i < list.length; i++) {
      if (i % 50 === 0 && stop()) {
        stopped = true;
        break;
      }
      const due = start + s * 1000 + (i * 1000) / list.length;
      const wait = due - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      const t0 = performance.now();
      sent++;
      calls.push(
        httpCall(list[i]!.endpointUrl, { method: "POST", json: payload, timeoutMs: 60_000 }).then(
          (res) => {
            if (res.status === 200) ms.push(performance.now() - t0);
            else failed++;
          },
          () => {
            failed++;
          },
        ),
      );
    }
  }
  // The last second's hits are sent over that second: its end is the window's.
  if (first && cpu)
    await new Promise((r) => setTimeout(r, Math.max(0, start + seconds * 1000 - performance.now())));
  const last = first && cpu ? cpuMark(cpu.serverPid, pids) : undefined;
  await Promise.all(calls);
  const perHit =
    first && last && sent > 0
      ? {
          serverUs: ((last.server - first.server) * 1e6) / sent,
          executorUs: ((last.executors - first.executors) * 1e6) / sent,
          hits: sent,
        }
      : undefined;
  return { ms, failed, stopped, ...(perHit ? { cpu: perHit } : {}) };
}

/** One hit of each tenant, `width` at a time. */
async function hitEach(list: Tenant[], width: number): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < list.length) {
      const tenant = list[next++]!;
      await httpCall(tenant.endpointUrl, { method: "POST", json: payload, timeoutMs: 120_000 }).catch(
        () => undefined,
      );
    }
  };
  await Promise.all(Array.from({ length: width }, worker));
}

/** The server's and the executors' CPU per hit at a hit a second each (no target: issue 29's node size). */
function cpuFigures(what: string, cpu: CpuPerHit | undefined, load: string): Figure[] {
  if (!cpu) return [];
  return [
    figure(
      "Tenants",
      `${what}, a hit a second each: server CPU per hit`,
      cpu.serverUs,
      "µs",
      undefined,
      `its own threads, over ${cpu.hits} hits; load ${load}`,
    ),
    figure(
      "Tenants",
      `${what}, a hit a second each: executor CPU per hit`,
      cpu.executorUs,
      "µs",
      undefined,
      "the tenants' executors, all their threads",
    ),
  ];
}

async function perExecutor(fount: FountProcess, active: Tenant[], seconds: number) {
  // Longer than a deploy's memory takes to settle: the idle inspection realm stops 10 s after it, and
  // about 7 MB of V8 pages stay with the executor until 15 to 25 s after it (docs/architecture.md).
  const hits = await hitEverySecond(active, seconds, undefined, {
    serverPid: fount.pid,
    pids: () => executorPids(fount.pid),
  });
  const pids = executorPids(fount.pid);
  const memory = pids.map(rollup).filter((m): m is Memory => m !== undefined);
  const total = sum(memory);
  const n = Math.max(1, memory.length);
  return { processes: memory.length, anonMb: total.anonMb / n, pssMb: total.pssMb / n, hits };
}

/** A tenant's first hit once its executor was stopped for being idle, one tenant at a time. */
async function firstHits(fount: FountProcess, list: Tenant[], log: (m: string) => void): Promise<number[]> {
  const deadline = Date.now() + 120_000;
  while (executorPids(fount.pid).length > 0 && Date.now() < deadline)
    await new Promise((r) => setTimeout(r, 250));
  if (executorPids(fount.pid).length > 0) log("Tenants: executors still running after 120 s idle");
  const ms: number[] = [];
  for (const tenant of list) {
    const t0 = performance.now();
    const res = await httpCall(tenant.endpointUrl, { method: "POST", json: payload, timeoutMs: 60_000 });
    if (res.status !== 200) throw new Error(`first hit answered ${res.status}: ${res.text.slice(0, 200)}`);
    ms.push(performance.now() - t0);
    await new Promise((r) => setTimeout(r, 200));
  }
  return ms;
}

export async function tenantsCost(
  ctx: PartContext,
  out: { figures: Figure[]; details: Record<string, unknown> },
): Promise<void> {
  const part = "Tenants";
  const log = (m: string) => ctx.log(m);
  const load = () => os.loadavg()[0]!.toFixed(1);
  const activeSeconds = Math.max(30, ctx.settings.durationS + 5);

  // A tenant's first hit once its executor stopped idle, on a server that stops them soon.
  {
    const fount = await ctx.fount(undefined, { FOUNT_EXECUTOR_IDLE_S: String(IDLE_S) });
    const few = await tenants(fount, 15, log);
    ctx.log(`${part}: first hits after the executors stopped idle (${IDLE_S} s; load ${load()})`);
    const samples = await firstHits(fount, few, log);
    const cold = distribution(samples);
    const p95 = percentile(Float64Array.from(samples).sort(), 95);
    out.details.firstHitMs = { ...cold, p95 };
    out.figures.push(
      figure(
        part,
        "first hit after idle, p50",
        cold.p50,
        "ms",
        { op: "<=", value: 150 },
        `15 tenants one at a time; p95 ${p95.toFixed(0)} ms; ${before.firstHitMs} ms before; load ${load()}`,
      ),
    );
  }

  // 50 tenants active, then as many more as --tenants asks, on one server (executors never idle here).
  const fount = await ctx.fount();
  const active = await tenants(fount, 50, log);
  ctx.log(`${part}: 50 tenants, one hit per second each for ${activeSeconds} s (load ${load()})`);
  const m = await perExecutor(fount, active, activeSeconds);
  out.details.fifty = m;
  out.figures.push(
    figure(
      part,
      "executor anonymous memory, 50 tenants active",
      m.anonMb,
      "MB",
      { op: "<=", value: 15 },
      `mean of ${m.processes} executors; ${before.anonMb} MB before; load ${load()}`,
    ),
    figure(
      part,
      "executor PSS, 50 tenants active",
      m.pssMb,
      "MB",
      { op: "<=", value: 20 },
      `${before.pssMb} MB before`,
    ),
    ...cpuFigures("50 tenants", m.hits.cpu, load()),
  );

  const asked = Math.max(50, ctx.settings.tenants);
  // The lowest MemAvailable seen when the run stopped for memory (undefined: it never did).
  let shortAtMb: number | undefined;
  const memoryShort = () => {
    const available = memoryAvailableMb();
    if (available >= MEMORY_FLOOR_MB) return false;
    shortAtMb = Math.min(shortAtMb ?? available, available);
    return true;
  };
  // What the machine can hold at the PSS an active executor had above (a tenth more for the server).
  const room = memoryAvailableMb() - MEMORY_FLOOR_MB;
  const fits = 50 + Math.max(0, Math.floor(room / (m.pssMb * 1.1)));
  const planned = Math.min(asked, fits);
  const notFit =
    planned < asked
      ? `${asked} tenants at ${m.pssMb.toFixed(1)} MB each do not fit in the ${room.toFixed(0)} MB available above a ${MEMORY_FLOOR_MB.toFixed(0)} MB floor`
      : undefined;
  if (notFit) log(`${part}: ${notFit}: deploying ${planned}`);
  ctx.log(`${part}: deploying ${planned - 50} more tenants (load ${load()})`);
  const all = [...active, ...(await tenants(fount, planned - 50, log, memoryShort))];
  const count = all.length;
  // Until 2026-11-27 a realm idle for a minute was stopped even when it was its process's last
  // (REALM_IDLE_MS, src/runtime/executors/model.ts), so the tenants deployed more than a minute ago
  // started theirs again at their next hit, about 100 ms of CPU each: all in the hits' first second, that
  // was a queue of minutes (hit p50 25 s with 674 tenants). The last realm now stays with its process;
  // this step, a few at a time, keeps comparisons with older commits fair and costs seconds now.
  ctx.log(`${part}: ${count} tenants, one hit each, 4 at a time (load ${load()})`);
  await hitEach(all, 4);
  ctx.log(`${part}: ${count} tenants, one hit per second each for ${activeSeconds} s`);
  const hits = await hitEverySecond(all, activeSeconds, memoryShort, {
    serverPid: fount.pid,
    pids: () => executorPids(fount.pid),
  });
  if (hits.stopped) log(`${part}: memory ran short (${shortAtMb?.toFixed(0)} MB available) during the hits`);
  // Measured where it stopped: the tenants held then are what this node holds in its memory.
  const reasons = [
    ...(notFit ? [notFit] : []),
    ...(shortAtMb !== undefined
      ? [`memory fell to ${shortAtMb.toFixed(0)} MB available${hits.stopped ? ", hits stopped early" : ""}`]
      : []),
  ];
  const short = reasons.length > 0 ? `; ${count} of ${asked} tenants run: ${reasons.join("; ")}` : "";
  const executors = executorPids(fount.pid)
    .map(rollup)
    .filter((x): x is Memory => x !== undefined);
  const server = rollup(fount.pid);
  // A server the kernel killed for memory (or that died otherwise) has nothing left to weigh: no figure.
  if (server === undefined || executors.length < count / 2)
    throw new Error(
      `the server or most executors are gone after ${count} tenants' hits (${executors.length} executors left${short}); check the kernel log for the OOM killer`,
    );
  const total = sum([...executors, server]);
  const latency = distribution(hits.ms);
  // What each more tenant costs is its executor; the server's own memory grows far less per tenant.
  const perExecutorPss = sum(executors).pssMb / Math.max(1, executors.length);
  const serverPss = server.pssMb;
  const fit = Math.floor((NODE_BUDGET_GB * 1024 - serverPss) / Math.max(1, perExecutorPss));
  out.details.many = {
    asked,
    memoryShortAtMb: shortAtMb,
    count,
    executors: executors.length,
    total,
    server,
    perExecutorPss,
    fit,
    latency,
    failed: hits.failed,
  };
  out.figures.push(
    figure(
      part,
      `${count} tenants: server and executors, PSS`,
      total.pssMb / 1024,
      "GB",
      // Judged at 1,000 tenants only: fewer, because memory ran short, are judged by the next figure.
      count >= 1000 ? { op: "<=", value: 24 } : undefined,
      `${executors.length} executors, ${(total.anonMb / 1024).toFixed(2)} GB anonymous; load ${load()}${short}`,
    ),
    figure(
      part,
      `${count} tenants: PSS per tenant`,
      total.pssMb / count,
      "MB",
      undefined,
      `executor ${perExecutorPss.toFixed(1)} MB each, server ${serverPss.toFixed(0)} MB`,
    ),
    figure(
      part,
      `tenants one node holds in ${NODE_BUDGET_GB} GB`,
      fit,
      "tenants",
      // Judged only when 1,000 were asked for: an extrapolation from a smaller run is a figure to read,
      // not a target met. A run of 1,000 that ran short of memory is judged by what the budget holds at
      // the PSS per executor it measured, which is then under 1,000.
      asked >= 1000 ? { op: ">=", value: 1000 } : undefined,
      short !== ""
        ? `at the ${count}-tenant run's executor PSS (${perExecutorPss.toFixed(1)} MB each, the server's ${serverPss.toFixed(0)} MB)${short}`
        : count >= 1000
          ? `at the ${count}-tenant run's executor PSS`
          : `extrapolated from ${count} tenants: executor PSS ${perExecutorPss.toFixed(1)} MB each, the server held at its ${serverPss.toFixed(0)} MB; not measured at 1,000`,
    ),
    ...cpuFigures(`${count} tenants`, hits.cpu, load()),
    figure(
      part,
      `${count} tenants: hit p99`,
      latency.p99,
      "ms",
      undefined,
      `p50 ${latency.p50.toFixed(1)} ms, ${hits.failed} failed of ${hits.ms.length + hits.failed}`,
    ),
  );
}
