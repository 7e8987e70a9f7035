/**
 * What traces cost: three Fount servers with the same HTTP source, one without traces (no OTLP endpoint:
 * the SDK is never loaded), one sending every span to a local collector that keeps nothing
 * (children/otlp-sink.ts), and one keeping 1 % of traces (`OTEL_TRACES_SAMPLER=traceidratio`), under the
 * same load in alternating slices (lib/interleave.ts). Figures: acknowledged hits per second and server
 * CPU per hit (server and executor processes; the collector's CPU is not the server's), each way, and the
 * spans the collector got per hit (a hit, its run and its commit: 3 when nothing was dropped).
 */
import { type InterleavedResult, interleavedLoads } from "../lib/interleave.ts";
import { runLoad } from "../lib/load.ts";
import { type Figure, figure } from "../lib/report.ts";
import { emitterCode, type PartContext, payloadText } from "./context.ts";

const part = "Traces";
/** Seconds of each alternating slice: short enough for both servers to share the machine's drift. */
const sliceS = 2;

export async function tracesCost(
  ctx: PartContext,
  out: { figures: Figure[]; details: Record<string, unknown> },
) {
  const { durationS, warmupS, connections } = ctx.settings;
  const sink = await ctx.helper("otlp-sink.ts");
  const { port } = await sink.call<{ port: number }>("ready");
  // Set empty, not left out: an OTLP endpoint in the bench's own environment would trace the "off" server.
  const off = await ctx.fount(undefined, {
    OTEL_EXPORTER_OTLP_ENDPOINT: "",
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "",
  });
  const traced = {
    OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "",
    OTEL_SERVICE_NAME: "fount-bench",
  };
  const on = await ctx.fount(undefined, traced);
  const sampled = await ctx.fount(undefined, {
    ...traced,
    OTEL_TRACES_SAMPLER: "traceidratio",
    OTEL_TRACES_SAMPLER_ARG: "0.01",
  });
  const offSource = await off.deploy(emitterCode("bench-traces-off", false), "bench-traces-off");
  const onSource = await on.deploy(emitterCode("bench-traces-on", false), "bench-traces-on");
  const sampledSource = await sampled.deploy(emitterCode("bench-traces-1pc", false), "bench-traces-1pc");
  ctx.log(`${part}: warm-up ${warmupS} s each`);
  for (const s of [offSource, onSource, sampledSource])
    await runLoad({ url: s.endpointUrl, body: payloadText, connections, durationS: warmupS });

  // The spans of the warm-up are sent within the batch processor's delay (5 s); counted from a quiet start.
  await new Promise((r) => setTimeout(r, 6_000));
  const before = await sink.call<{ requests: number; spans: number }>("count");
  const slices = Math.max(1, Math.round(durationS / sliceS));
  ctx.log(
    `${part}: traces off, on, and on for 1 % in alternating ${sliceS} s slices, ${slices} each, at ${connections} connections`,
  );
  const [offLoad, onLoad, sampledLoad] = (await interleavedLoads(
    [
      { url: offSource.endpointUrl, pid: off.pid },
      { url: onSource.endpointUrl, pid: on.pid },
      { url: sampledSource.endpointUrl, pid: sampled.pid },
    ],
    { body: payloadText, connections, slices, sliceS },
  )) as [InterleavedResult, InterleavedResult, InterleavedResult];
  // Whatever the last slice ended is sent within the batch delay.
  await new Promise((r) => setTimeout(r, 6_000));
  const after = await sink.call<{ requests: number; spans: number }>("count");
  const spans = after.spans - before.spans;
  const exports = after.requests - before.requests;
  out.details.off = offLoad;
  out.details.on = onLoad;
  out.details.sampled = sampledLoad;
  out.details.collector = { spans, exports };

  const cpuPerHitUs = (l: InterleavedResult) => (1e6 * l.cpu.serverS) / Math.max(1, l.ok);
  const rates = (l: InterleavedResult) =>
    `${l.ok.toLocaleString("en-US")} ok, ${l.non2xx} non-2xx, ${l.errors} errors; slices ${l.sliceRates.join(" ")}`;
  out.figures.push(
    figure(part, "rate, traces off", offLoad.okPerS, "req/s", undefined, rates(offLoad)),
    figure(part, "rate, traces on", onLoad.okPerS, "req/s", undefined, rates(onLoad)),
    figure(part, "rate, traces on for 1 %", sampledLoad.okPerS, "req/s", undefined, rates(sampledLoad)),
    figure(part, "rate on / off", (100 * onLoad.okPerS) / offLoad.okPerS, "%"),
    figure(
      part,
      "server CPU per hit, traces off",
      cpuPerHitUs(offLoad),
      "µs",
      undefined,
      `p50 ${offLoad.latencyMs.p50.toFixed(1)} ms`,
    ),
    figure(
      part,
      "server CPU per hit, traces on",
      cpuPerHitUs(onLoad),
      "µs",
      undefined,
      `p50 ${onLoad.latencyMs.p50.toFixed(1)} ms`,
    ),
    figure(
      part,
      "server CPU per hit, on for 1 %",
      cpuPerHitUs(sampledLoad),
      "µs",
      undefined,
      `p50 ${sampledLoad.latencyMs.p50.toFixed(1)} ms`,
    ),
    figure(part, "CPU per hit on / off", (100 * cpuPerHitUs(onLoad)) / cpuPerHitUs(offLoad), "%"),
    figure(part, "CPU per hit 1 % / off", (100 * cpuPerHitUs(sampledLoad)) / cpuPerHitUs(offLoad), "%"),
    figure(
      part,
      "spans exported per hit",
      spans / Math.max(1, onLoad.ok + sampledLoad.ok / 100),
      "spans",
      undefined,
      `${spans.toLocaleString("en-US")} spans in ${exports} exports for ${onLoad.ok.toLocaleString("en-US")} hits traced` +
        ` and ${sampledLoad.ok.toLocaleString("en-US")} at 1 % (3 a traced hit when none was dropped)`,
    ),
  );
}
