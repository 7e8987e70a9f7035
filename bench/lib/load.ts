/** HTTP load with autocannon, run in the bench process (the servers under test run in their own). */
import autocannon, { type AutocannonRequest } from "autocannon";

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
  const requests: AutocannonRequest[] | undefined = bodyOf
    ? [{ method: "POST", setupRequest: (req) => ({ ...req, body: bodyOf() }) }]
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
