/**
 * Two servers measured under the same load in alternating short slices (A B, B A, A B, …) rather than
 * one long run after the other. This machine's speed drifts by a third or more within minutes, so two
 * back-to-back 10 s runs can compare a fast minute with a slow one; slices of a few seconds in ABBA order
 * put both servers through the same minutes, and their ratio stops moving with the drift.
 */
import { type LoadResult, runLoad } from "./load.ts";
import { type CpuSplit, cpuMeter } from "./processes.ts";
import { type Distribution, distribution } from "./stats.ts";

export interface LoadTarget {
  url: string;
  /** The server process whose CPU (with its children) is counted. */
  pid: number;
}

/** The counts of every slice added up (as `LoadResult` has them for one run), with merged latencies. */
export interface InterleavedResult extends Omit<LoadResult, "latencyMs" | "statusCodes"> {
  /** Over every response of every slice. */
  latencyMs: Distribution;
  cpu: CpuSplit;
  /** Acknowledged requests per second of each slice, in order. */
  sliceRates: number[];
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
  const results = [a, b].map((): InterleavedResult & { samples: number[] } => ({
    ok: 0,
    non2xx: 0,
    errors: 0,
    timeouts: 0,
    durationS: 0,
    okPerS: 0,
    latencyMs: distribution([]),
    cpu: { serverS: 0, benchS: 0, otherS: 0 },
    sliceRates: [],
    samples: [],
  }));
  const targets = [a, b];
  for (let i = 0; i < o.slices; i++) {
    const order = i % 2 === 0 ? [0, 1] : [1, 0];
    for (const t of order) {
      const r = results[t]!;
      const meter = cpuMeter(targets[t]!.pid);
      const load = await runLoad({
        url: targets[t]!.url,
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
      r.cpu.serverS += cpu.serverS;
      r.cpu.benchS += cpu.benchS;
      r.cpu.otherS += cpu.otherS;
    }
  }
  const [ra, rb] = results.map(({ samples, ...r }) => ({
    ...r,
    okPerS: r.ok / r.durationS,
    latencyMs: distribution(samples),
  }));
  return [ra!, rb!];
}
