/**
 * SSE fan-out: `sseClients` streams on one source (`GET /sources/{id}/sse`), held by a few client
 * processes so that reading 1,000 sockets is not the bench's own bottleneck, while the source gets
 * emits at `sseRate` per second. Each client records, per event, its arrival against the `emitted_at`
 * the component stamped, so the latency covers commit, hub fan-out, the socket and the client's parse.
 * The emits come as autocannon sends them at a fixed rate: each of the 5 connections sends its share of
 * a second back to back as the second starts, so 50/s is a burst of 50 events each second.
 */
import { runLoad } from "../lib/load.ts";
import { cpuMeter, type HelperChild, sleep } from "../lib/processes.ts";
import { type Figure, figure } from "../lib/report.ts";
import { SseAudience } from "../lib/sse-audience.ts";
import { distribution } from "../lib/stats.ts";
import { emitterCode, type PartContext, payload } from "./context.ts";

const part = "SSE fan-out";
/** Client processes; each holds its share of the streams. */
const clientProcesses = 4;

export async function sseFanOut(
  ctx: PartContext,
  out: { figures: Figure[]; details: Record<string, unknown> },
) {
  const { durationS, sseClients, sseRate } = ctx.settings;
  const fount = await ctx.fount();
  const source = await fount.deploy(emitterCode("bench-sse", true), "bench-sse");
  const children: HelperChild[] = [];
  for (let i = 0; i < clientProcesses; i++) children.push(await ctx.helper("sse-clients.ts"));

  ctx.log(`${part}: opening ${sseClients} streams`);
  const audience = await SseAudience.open(children, `${fount.url}/sources/${source.id}/sse`, sseClients);
  const { connected, openErrors, openMs } = audience;
  if (connected < sseClients) {
    throw new Error(`only ${connected} of ${sseClients} streams opened: ${openErrors.join("; ")}`);
  }

  // A short warm-up (also checks that events arrive at all), then the measured run.
  const bodyOf = () => JSON.stringify({ ...payload, sent_at: Date.now() });
  const body = bodyOf();
  await runLoad({
    url: source.endpointUrl,
    body,
    bodyOf,
    connections: 5,
    durationS: 2,
    overallRate: sseRate,
  });
  const warm = await audience.awaitFanOut(1, 5_000);
  if (warm.received.some((n) => n === 0)) throw new Error("a stream received nothing during the warm-up");
  await sleep(500);
  await audience.reset();

  ctx.log(`${part}: ${durationS} s of emits at ${sseRate}/s to ${connected} streams`);
  const meter = cpuMeter(fount.pid);
  const load = await runLoad({
    url: source.endpointUrl,
    body,
    bodyOf,
    connections: 5,
    durationS,
    overallRate: sseRate,
  });
  await audience.awaitFanOut(load.ok, 3_000);
  // Emits of requests cut off at the end land a moment later.
  await sleep(500);
  const r = await audience.report();
  const cpu = meter();
  await audience.close();

  const emit = distribution(r.emitLatencies);
  const sent = distribution(r.sendLatencies);
  // Requests cut off when the load stopped are not counted as 200s but may still emit: every stream
  // should see what the busiest one saw, which is at least the acknowledged emits.
  const emitted = Math.max(load.ok, ...r.received);
  const expectedDeliveries = emitted * connected;
  const delivered = r.received.reduce((a, b) => a + b, 0);
  const short = r.received.filter((n) => n < emitted).length;
  out.details.sse = {
    clients: connected,
    openMs,
    openErrors,
    load,
    delivered,
    expectedDeliveries,
    stillOpen: r.open,
    clientsShort: short,
    emitToClientMs: emit,
    requestToClientMs: sent,
    cpu,
  };
  out.figures.push(
    figure(
      part,
      "emit-to-client p50",
      emit.p50,
      "ms",
      undefined,
      `${connected} streams, ${emitted} events at ${load.okPerS.toFixed(0)}/s; request-to-client p50 ${sent.p50} ms`,
    ),
    figure(
      part,
      "emit-to-client p99",
      emit.p99,
      "ms",
      // Issue 29: on an idle machine (issue 4 had 100 ms).
      { op: "<=", value: 50 },
      `max ${emit.max} ms; request-to-client p99 ${sent.p99} ms`,
    ),
    figure(
      part,
      "events not received",
      expectedDeliveries - delivered,
      "events",
      { op: "<=", value: 0 },
      `${delivered.toLocaleString("en-US")} of ${expectedDeliveries.toLocaleString("en-US")}; ${r.open} streams still open, ` +
        `${short} short; opened in ${(openMs / 1000).toFixed(1)} s; server CPU ${cpu.serverS.toFixed(1)} s, ` +
        `clients+bench ${cpu.benchS.toFixed(1)} s`,
    ),
  );
}
