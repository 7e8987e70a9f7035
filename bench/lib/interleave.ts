/**
 * Servers measured under the same load in alternating short slices (A B, B A, A B, …; with more
 * targets A B C, C B A, …) rather than one long run after the other. This machine's speed drifts by a third or more within minutes, so two
 * back-to-back 10 s runs can compare a fast minute with a slow one; slices of a few seconds in ABBA order
 * put both servers through the same minutes, and their ratio stops moving with the drift.
 */
import { type Leg, type LoadResult, runSpread } from "./load.ts";
import { type CpuSplit, cpuMeter } from "./processes.ts";
import { type Distribution, distribution } from "./stats.ts";

export interface LoadTarget {
  /** One URL, or several servers sharing the connections (bench/lib/load.ts, `runSpread`). */
  url: string | Leg[];
  /** The server processes whose CPU (with their children) is counted. */
  pid: number | number[];
}

/** The counts of every slice added up (as `LoadResult` has them for one run), with merged latencies. */
export interface InterleavedResult extends Omit<LoadResult, "latencyMs" | "statusCodes"> {
  /** Over every response of every slice. */
  latencyMs: Distribution;
  cpu: CpuSplit;
  /** Acknowledged requests per second of each slice, in order. */
  sliceRates: number[];
  /** Acknowledged requests of each leg (each server of a spread target), all slices added. */
  legOk: number[];
}

export interface InterleaveOptions {
  body: string;
  connections: number;
  /** Slices per target. */
  slices: number;
  sliceS: number;
}

export async function interleavedLoad(
  a: LoadTarget,
  b: LoadTarget,
  o: InterleaveOptions,
): Promise<[InterleavedResult, InterleavedResult]> {
  const [ra, rb] = await interleavedLoads([a, b], o);
  return [ra!, rb!];
}

/** Each target gets `o.slices` slices; odd rounds go through the targets in reverse order. */
export async function interleavedLoads(
  targets: LoadTarget[],
  o: InterleaveOptions,
): Promise<InterleavedResult[]> {
  const results = targets.map((t): InterleavedResult & { samples: number[] } => ({
    ok: 0,
    non2xx: 0,
    errors: 0,
    timeouts: 0,
    durationS: 0,
    okPerS: 0,
    latencyMs: distribution([]),
    cpu: { serverS: 0, benchS: 0, otherS: 0, postgresS: 0 },
    sliceRates: [],
    legOk: typeof t.url === "string" ? [0] : t.url.map(() => 0),
    samples: [],
  }));
  const forward = targets.map((_, i) => i);
  const backward = [...forward].reverse();
  for (let i = 0; i < o.slices; i++) {
    for (const t of i % 2 === 0 ? forward : backward) {
      const r = results[t]!;
      const target = targets[t]!;
      const meter = cpuMeter(target.pid);
      const load = await runSpread(typeof target.url === "string" ? [{ url: target.url }] : target.url, {
        body: o.body,
        connections: o.connections,
        durationS: o.sliceS,
        latencies: r.samples,
      });
      const cpu = meter();
      r.ok += load.ok;
      r.non2xx += load.non2xx;
      r.errors += load.errors;
      r.timeouts += load.timeouts;
      r.durationS += load.durationS;
      r.sliceRates.push(Math.round(load.okPerS));
      load.legOk.forEach((n, leg) => {
        r.legOk[leg]! += n;
      });
      r.cpu.serverS += cpu.serverS;
      r.cpu.benchS += cpu.benchS;
      r.cpu.otherS += cpu.otherS;
      r.cpu.postgresS += cpu.postgresS;
    }
  }
  return results.map(({ samples, ...r }) => ({
    ...r,
    okPerS: r.ok / r.durationS,
    latencyMs: distribution(samples),
  }));
}
