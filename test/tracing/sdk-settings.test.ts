/**
 * The OTEL_* settings that src/tracing-sdk.ts reads itself (the SDK packages no longer do): the sampler,
 * the propagators, and the SDK's own complaints, which reach the server's log once, readable.
 */
import assert from "node:assert/strict";
import net from "node:net";
import { afterEach, test } from "node:test";
import { diag } from "@opentelemetry/api";
import { injectHeaders, parentFromHeaders, spanKind, startSpan, tracing } from "../../src/tracing.ts";
import { startTracing, type TracingHandle } from "../../src/tracing-sdk.ts";

const settings = [
  "OTEL_EXPORTER_OTLP_ENDPOINT",
  "OTEL_EXPORTER_OTLP_TIMEOUT",
  "OTEL_TRACES_SAMPLER",
  "OTEL_TRACES_SAMPLER_ARG",
  "OTEL_PROPAGATORS",
  "OTEL_BSP_SCHEDULE_DELAY",
];
let handle: TracingHandle | undefined;
afterEach(async () => {
  await handle?.stop();
  handle = undefined;
  for (const name of settings) delete process.env[name];
});

/** Starts the SDK with `env`, its warnings collected. */
function start(env: Record<string, string>): string[] {
  // Nothing listens there: spans left at the end fail within the second the timeout gives them.
  Object.assign(process.env, {
    OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:9",
    OTEL_EXPORTER_OTLP_TIMEOUT: "1000",
    ...env,
  });
  const warnings: string[] = [];
  handle = startTracing({ nodeId: "n", version: "0", log: { warn: (_o, msg) => warnings.push(msg) } });
  return warnings;
}

const callerHeaders = { traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" };

test("by default a span follows its caller's traceparent and is kept", () => {
  start({});
  assert.equal(tracing.on, true);
  const parent = parentFromHeaders(callerHeaders);
  assert.equal(parent?.traceId, "4bf92f3577b34da6a3ce929d0e0e4736");
  const span = startSpan("s", spanKind.server, {}, parent);
  assert.equal(span.isRecording(), true);
  const headers: Record<string, string> = {};
  injectHeaders(span.spanContext(), headers);
  assert.equal(headers.traceparent, `00-4bf92f3577b34da6a3ce929d0e0e4736-${span.spanContext().spanId}-01`);
  span.end();
});

test("OTEL_TRACES_SAMPLER=always_off keeps nothing", () => {
  start({ OTEL_TRACES_SAMPLER: "always_off" });
  assert.equal(startSpan("s", spanKind.internal, {}, undefined).isRecording(), false);
});

test("an unknown sampler falls back to parentbased_always_on with a warning", () => {
  const warnings = start({ OTEL_TRACES_SAMPLER: "sometimes" });
  assert.match(warnings.join("\n"), /OTEL_TRACES_SAMPLER names a sampler Fount does not have/);
  assert.equal(startSpan("s", spanKind.internal, {}, undefined).isRecording(), true);
});

test("OTEL_PROPAGATORS=none reads no parent from a request and writes no header", () => {
  start({ OTEL_PROPAGATORS: "none" });
  assert.equal(parentFromHeaders(callerHeaders), undefined);
  const headers: Record<string, string> = {};
  injectHeaders(startSpan("s", spanKind.client, {}, undefined).spanContext(), headers);
  assert.deepEqual(headers, {});
});

test("spans that cannot be sent are said in the log, as the error's message", async () => {
  // A port nothing listens on: each export is refused.
  const closed = await new Promise<number>((resolve) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
  const warnings = start({
    OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${closed}`,
    OTEL_EXPORTER_OTLP_TIMEOUT: "1000",
    OTEL_BSP_SCHEDULE_DELAY: "20",
  });
  startSpan("s", spanKind.internal, {}, undefined).end();
  // The batch goes out within 20 ms, and fails within the export's 1 s timeout (retries included).
  const deadline = Date.now() + 30_000;
  while (!warnings.some((w) => w.includes("ECONNREFUSED")) && Date.now() < deadline)
    await new Promise((r) => setTimeout(r, 50));
  assert.deepEqual(
    warnings.map((w) => w.replace(/:\d+$/, ":…")),
    ["traces: spans were not sent: connect ECONNREFUSED 127.0.0.1:…"],
  );
});

test("the same complaint of the SDK is logged once, not at every batch", () => {
  const warnings = start({});
  for (let i = 0; i < 3; i++) diag.error("export failed: 503");
  diag.warn("something else");
  assert.deepEqual(warnings, ["traces: export failed: 503", "traces: something else"]);
});
