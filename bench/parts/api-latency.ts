/**
 * Latencies of single API calls, one at a time: a warm manual run (`POST /v1/sources/{id}/run`), and
 * deploy-to-first-event (`POST /v1/sources` with new code, then the first endpoint hit acknowledged).
 */
import { httpCall, RawConnection } from "../lib/http-client.ts";
import { benchApiKey, type FountProcess } from "../lib/processes.ts";
import { type Figure, figure } from "../lib/report.ts";
import { distribution, median } from "../lib/stats.ts";
import { emitterCode, type PartContext, payload, payloadText } from "./context.ts";

const runs = 200;
/**
 * Runs before the measured ones: V8 compiles the server's and the executor's code over the first
 * hundreds of runs, and after 20 a run's main-thread CPU was still 900 µs against 595 µs after 300
 * (docs/architecture.md, "Manual runs without the realm's extra wakes"), so a p50 taken then measured
 * the compiler more than a warm run.
 */
const warmRuns = 300;
const deploys = 5;

/** One `POST /v1/sources/{id}/run` of an emitter source, timed from the client (ms); throws unless it emitted. */
export async function timedManualRun(fount: FountProcess, sourceId: string): Promise<number> {
  const t0 = performance.now();
  const res = await fount.api("POST", `/v1/sources/${sourceId}/run`, { event: payload }, 10_000);
  const ms = performance.now() - t0;
  if (res.data?.ok !== true || res.data.emits?.length !== 1) {
    throw new Error(`a manual run did not emit: ${JSON.stringify(res).slice(0, 200)}`);
  }
  return ms;
}

/** The same run through a raw connection (`RawConnection`): the server's share of the time, wire to wire. */
export async function rawManualRun(fount: FountProcess, sourceId: string): Promise<RawConnection> {
  return RawConnection.open(
    `${fount.url}/v1/sources/${sourceId}/run`,
    "POST",
    { Authorization: `Bearer ${benchApiKey}` },
    JSON.stringify({ event: payload }),
  );
}

/** One call of `rawManualRun`'s connection, timed (ms); throws unless it emitted. */
export async function timedRawRun(connection: RawConnection): Promise<number> {
  const t0 = performance.now();
  const answer = await connection.call();
  const ms = performance.now() - t0;
  if (!answer.startsWith("HTTP/1.1 200") || !answer.includes('"ok":true')) {
    throw new Error(`a manual run did not emit: ${answer.slice(0, 300)}`);
  }
  return ms;
}

export async function manualRun(
  ctx: PartContext,
  out: { figures: Figure[]; details: Record<string, unknown> },
) {
  const part = "Manual run";
  const fount = await ctx.fount();
  const source = await fount.deploy(emitterCode("bench-manual", false), "bench-manual");
  const raw = await rawManualRun(fount, source.id);
  const times: number[] = [];
  const rawTimes: number[] = [];
  ctx.log(`${part}: ${runs} sequential runs after ${warmRuns} warm-up runs, each client in turn`);
  try {
    for (let i = 0; i < warmRuns + runs; i++) {
      const ms = await timedManualRun(fount, source.id);
      const rawMs = await timedRawRun(raw);
      if (i >= warmRuns) {
        times.push(ms);
        rawTimes.push(rawMs);
      }
    }
  } finally {
    raw.close();
  }
  const d = distribution(times);
  const w = distribution(rawTimes);
  out.details.manualRunMs = d;
  out.details.manualRunRawMs = w;
  out.figures.push(
    figure(
      part,
      "warm run latency p50",
      d.p50,
      "ms",
      // Issue 29, on an idle machine.
      { op: "<=", value: 1 },
      `${runs} sequential POST /v1/sources/{id}/run from node:http`,
    ),
    figure(part, "warm run latency p99", d.p99, "ms", undefined, `max ${d.max.toFixed(1)} ms`),
    figure(
      part,
      "wire-to-wire p50",
      w.p50,
      "ms",
      undefined,
      `the same runs from a raw keep-alive socket, in turn with the others; p99 ${w.p99.toFixed(1)} ms`,
    ),
  );
}

export async function deployToFirstEvent(
  ctx: PartContext,
  out: { figures: Figure[]; details: Record<string, unknown> },
) {
  const part = "Deploy";
  const fount = await ctx.fount();
  const samples: Array<{ deployMs: number; firstEventMs: number; totalMs: number }> = [];
  ctx.log(`${part}: 1 unmeasured + ${deploys} measured deploys of new code`);
  // The first deploy also starts the owner's executor process and warms the builder; it is reported apart.
  for (let i = 0; i <= deploys; i++) {
    // New code every time (a comment is enough), so no build is reused.
    const code = `// deploy ${i} at ${Date.now()}\n${emitterCode(`bench-deploy-${i}`, false)}`;
    const t0 = performance.now();
    const source = await fount.deploy(code, `bench-deploy-${i}`);
    const t1 = performance.now();
    const hit = await httpCall(source.endpointUrl, { method: "POST", body: payloadText, timeoutMs: 30_000 });
    const t2 = performance.now();
    if (hit.status !== 200) throw new Error(`first hit of deploy ${i} answered ${hit.status}: ${hit.text}`);
    samples.push({ deployMs: t1 - t0, firstEventMs: t2 - t1, totalMs: t2 - t0 });
  }
  const [cold, ...warm] = samples;
  out.details.deploy = { cold, warm };
  const total = median(warm.map((s) => s.totalMs));
  out.figures.push(
    figure(
      part,
      "deploy-to-first-event (median)",
      total,
      "ms",
      undefined,
      `of ${deploys}: deploy call ${median(warm.map((s) => s.deployMs)).toFixed(0)} ms + first hit ` +
        `${median(warm.map((s) => s.firstEventMs)).toFixed(0)} ms; first deploy on a fresh server ${cold.totalMs.toFixed(0)} ms`,
    ),
  );
}
