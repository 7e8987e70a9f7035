/** HTTP load with autocannon, run in the bench process (the servers under test run in their own). */
import autocannon, { type AutocannonRequest } from "autocannon";
import { distribution } from "./stats.ts";

export interface LoadOptions {
  url: string;
  body: string;
  connections: number;
  durationS: number;
  /** Requests per second across all connections; unset means as fast as the server answers. */
  overallRate?: number;
  /** Builds each request's body when it goes out (timestamps); `body` is used otherwise. */
  bodyOf?: () => string;
  /** Receives the latency (ms) of every 2xx response, so slices of several runs can be merged. */
  latencies?: number[];
  /**
   * Paths each connection POSTs to in turn (several sources on one server), instead of `url`'s own
   * path. The requests are built once, so the load generator does no more work per request than with one.
   */
  paths?: string[];
}

export interface LoadResult {
  /** 2xx answers: acknowledged requests. */
  ok: number;
  non2xx: number;
  errors: number;
  timeouts: number;
  durationS: number;
  /** 2xx answers per second of the run. */
  okPerS: number;
  latencyMs: { p50: number; p90: number; p99: number; max: number; mean: number };
  statusCodes: Record<string, number>;
}

export function runLoad(o: LoadOptions): Promise<LoadResult> {
  const bodyOf = o.bodyOf;
  // autocannon copies every key, so an absent setup must be absent, not undefined.
  const setup: Partial<AutocannonRequest> = bodyOf
    ? { setupRequest: (req) => ({ ...req, body: bodyOf() }) }
    : {};
  const requests: AutocannonRequest[] | undefined = o.paths
    ? o.paths.map((path) => ({ method: "POST", path, ...setup }))
    : bodyOf
      ? [{ method: "POST", ...setup }]
      : undefined;
  return new Promise((resolve, reject) => {
    // autocannon stops itself after `duration`; this is the bound should it not.
    const guard = setTimeout(() => instance.stop(), (o.durationS + 15) * 1000);
    const instance = autocannon(
      {
        url: o.url,
        connections: o.connections,
        duration: o.durationS,
        method: "POST",
        headers: { "content-type": "application/json" },
        body: o.body,
        overallRate: o.overallRate,
        timeout: 10,
        requests,
      },
      (err, r) => {
        clearTimeout(guard);
        if (err) return reject(err);
        const codes: Record<string, number> = {};
        for (const [code, s] of Object.entries(r.statusCodeStats ?? {})) codes[code] = s.count;
        resolve({
          ok: r["2xx"],
          non2xx: r.non2xx,
          errors: r.errors,
          timeouts: r.timeouts,
          durationS: r.duration,
          okPerS: r["2xx"] / r.duration,
          latencyMs: {
            p50: r.latency.p50,
            p90: r.latency.p90,
            p99: r.latency.p99,
            max: r.latency.max,
            mean: r.latency.mean,
          },
          statusCodes: codes,
        });
      },
    );
    const latencies = o.latencies;
    if (latencies) {
      instance.on("response", (_client, status, _bytes, ms) => {
        if (status >= 200 && status < 300) latencies.push(ms);
      });
    }
  });
}

/** One server of a spread load: its base URL (or one endpoint's), and the paths to cycle through. */
export interface Leg {
  url: string;
  paths?: string[];
}

/** A spread load's counts, as one run has them, with each leg's 2xx answers. */
export interface SpreadResult extends LoadResult {
  legOk: number[];
}

/**
 * The same load spread over several servers (the nodes of a cluster behind a load balancer that does
 * not route by source): `connections` split as evenly as they go, one autocannon instance per leg, all
 * at once. Latencies go to `latencies` when given; the percentiles returned are over every leg's.
 */
export async function runSpread(
  legs: Leg[],
  o: Omit<LoadOptions, "url" | "paths" | "overallRate">,
): Promise<SpreadResult> {
  const samples = o.latencies ?? [];
  const from = samples.length;
  const results = await Promise.all(
    legs.map((leg, i) =>
      runLoad({
        ...o,
        url: leg.url,
        paths: leg.paths,
        // 50 over 3 legs: 17, 17, 16.
        connections: Math.floor(o.connections / legs.length) + (i < o.connections % legs.length ? 1 : 0),
        latencies: samples,
      }),
    ),
  );
  const sum = (f: (r: LoadResult) => number) => results.reduce((a, r) => a + f(r), 0);
  const durationS = Math.max(...results.map((r) => r.durationS));
  const codes: Record<string, number> = {};
  for (const r of results) {
    for (const [code, n] of Object.entries(r.statusCodes)) codes[code] = (codes[code] ?? 0) + n;
  }
  const d = distribution(samples.slice(from));
  return {
    ok: sum((r) => r.ok),
    non2xx: sum((r) => r.non2xx),
    errors: sum((r) => r.errors),
    timeouts: sum((r) => r.timeouts),
    durationS,
    okPerS: sum((r) => r.ok) / durationS,
    latencyMs: { p50: d.p50, p90: d.p90, p99: d.p99, max: d.max, mean: d.mean },
    statusCodes: codes,
    legOk: results.map((r) => r.ok),
  };
}
