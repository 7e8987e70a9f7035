/**
 * What traces cost: two Fount servers with the same HTTP source, one without traces (no OTLP endpoint:
 * the SDK is never loaded) and one sending every span to a local collector that keeps nothing
 * (children/otlp-sink.ts), under the same load in alternating slices (lib/interleave.ts). Figures:
 * acknowledged hits per second and server CPU per hit (server and executor processes; the collector's
 * CPU is not the server's), each way, and the spans the collector got per hit (a hit, its run and its
 * commit: 3 when nothing was dropped).
 */
import { interleavedLoad } from "../lib/interleave.ts";
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
  const on = await ctx.fount(undefined, {
    OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "",
    OTEL_SERVICE_NAME: "fount-bench",
  });
  const offSource = await off.deploy(emitterCode("bench-traces-off", false), "bench-traces-off");
  const onSource = await on.deploy(emitterCode("bench-traces-on", false), "bench-traces-on");
  ctx.log(`${part}: warm-up ${warmupS} s each`);
  await runLoad({ url: offSource.endpointUrl, body: payloadText, connections, durationS: warmupS });
  await runLoad({ url: onSource.endpointUrl, body: payloadText, connections, durationS: warmupS });

  // The spans of the warm-up are sent within the batch processor's delay (5 s); counted from a quiet start.
  await new Promise((r) => setTimeout(r, 6_000));
  const before = await sink.call<{ requests: number; spans: number }>("count");
  const slices = Math.max(1, Math.round(durationS / sliceS));
  ctx.log(
    `${part}: traces off and on in alternating ${sliceS} s slices, ${slices} each, at ${connections} connections`,
  );
  const [offLoad, onLoad] = await interleavedLoad(
    { url: offSource.endpointUrl, pid: off.pid },
    { url: onSource.endpointUrl, pid: on.pid },
    { body: payloadText, connections, slices, sliceS },
  );
  // Whatever the last slice ended is sent within the batch delay.
  await new Promise((r) => setTimeout(r, 6_000));
  const after = await sink.call<{ requests: number; spans: number }>("count");
  const spans = after.spans - before.spans;
  const exports = after.requests - before.requests;
  out.details.off = offLoad;
  out.details.on = onLoad;
  out.details.collector = { spans, exports };

  const cpuPerHitUs = (l: typeof offLoad) => (1e6 * l.cpu.serverS) / Math.max(1, l.ok);
  const rates = (l: typeof offLoad) =>
    `${l.ok.toLocaleString("en-US")} ok, ${l.non2xx} non-2xx, ${l.errors} errors; slices ${l.sliceRates.join(" ")}`;
  out.figures.push(
    figure(part, "rate, traces off", offLoad.okPerS, "req/s", undefined, rates(offLoad)),
    figure(part, "rate, traces on", onLoad.okPerS, "req/s", undefined, rates(onLoad)),
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
    figure(part, "CPU per hit on / off", (100 * cpuPerHitUs(onLoad)) / cpuPerHitUs(offLoad), "%"),
    figure(
      part,
      "spans exported per hit",
      spans / Math.max(1, onLoad.ok),
      "spans",
      undefined,
      `${spans.toLocaleString("en-US")} spans in ${exports} exports for ${onLoad.ok.toLocaleString("en-US")} hits (3 each when none was dropped)`,
    ),
  );
}
