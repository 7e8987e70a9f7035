/**
 * The OpenTelemetry SDK, set up from the standard OTEL_* variables when traces are wanted
 * (tracing.ts, `tracesWanted`): main.ts imports this file only then, so a server without traces never
 * loads the SDK. Spans go in batches to an OTLP/HTTP endpoint as JSON (`@opentelemetry/exporter-trace-otlp-http`,
 * which reads OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, _HEADERS, _TIMEOUT, _COMPRESSION and the certificate
 * settings itself). What the SDK packages no longer read themselves (SDK 2 moved it to `sdk-node`, with
 * every exporter of every signal) is read here: the sampler, the batch processor's settings and the
 * propagators. docs/operations.md, *Traces*, lists them.
 */
import {
  type Context,
  createTraceState,
  DiagLogLevel,
  diag,
  propagation,
  ROOT_CONTEXT,
  type SpanContext,
  type TextMapPropagator,
  trace,
} from "@opentelemetry/api";
import {
  CompositePropagator,
  getNumberFromEnv,
  getStringFromEnv,
  getStringListFromEnv,
  W3CBaggagePropagator,
  W3CTraceContextPropagator,
} from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { detectResources, envDetector, resourceFromAttributes } from "@opentelemetry/resources";
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  type Sampler,
  type SpanExporter,
  TraceIdRatioBasedSampler,
  TracerProvider,
} from "@opentelemetry/sdk-trace";
import { disableTracing, enableTracing } from "./tracing.ts";

/** Where the SDK's own complaints (an export that failed, a setting it refused) are written. */
export interface TracingLog {
  warn(obj: object, msg: string): void;
}

export interface TracingOptions {
  /** `service.instance.id`: this node's name (FOUNT_NODE_ID), which tells the nodes of a cluster apart. */
  nodeId: string;
  /** The server's version, as `service.version`. */
  version: string;
  log: TracingLog;
  /** Instead of the OTLP exporter (tests). */
  exporter?: SpanExporter;
}

/** The SDK while it runs. */
export interface TracingHandle {
  /** Where spans go, for the start-up report. */
  target: string;
  /** Sends the spans ended so far. */
  flush(): Promise<void>;
  /** Sends what is left and stops making spans. */
  stop(): Promise<void>;
}

/** The same complaint of the SDK is logged at most this often (an unreachable collector fails every batch). */
const repeatLogMs = 5 * 60_000;

/** Sets the SDK up and turns tracing on (tracing.ts, `tracing.on`). */
export function startTracing(options: TracingOptions): TracingHandle {
  watchDiagnostics(options.log);
  const resource = resourceFromAttributes({
    "service.name": "fount",
    "service.version": options.version,
    "service.instance.id": options.nodeId,
  }).merge(detectResources({ detectors: [envDetector] }));
  const exporter = options.exporter ?? new OTLPTraceExporter();
  const provider = new TracerProvider({
    resource,
    sampler: samplerFromEnv(options.log),
    spanProcessors: [
      new BatchSpanProcessor({
        exporter,
        maxQueueSize: getNumberFromEnv("OTEL_BSP_MAX_QUEUE_SIZE"),
        maxExportBatchSize: getNumberFromEnv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE"),
        scheduledDelayMillis: getNumberFromEnv("OTEL_BSP_SCHEDULE_DELAY"),
        exportTimeoutMillis: getNumberFromEnv("OTEL_BSP_EXPORT_TIMEOUT"),
      }),
    ],
  });
  const propagator = propagatorFromEnv(options.log);
  // Registered globally too, for any library's instrumentation a deployment adds; Fount's own spans
  // take their tracer and propagator from tracing.ts.
  trace.setGlobalTracerProvider(provider);
  propagation.setGlobalPropagator(propagator);
  const tracer = provider.getTracer("fount", options.version);
  enableTracing({
    tracer,
    propagator,
    contextOf: (parent: SpanContext | undefined): Context =>
      parent ? trace.setSpanContext(ROOT_CONTEXT, parent) : ROOT_CONTEXT,
    spanContextOf: (context) => trace.getSpanContext(context),
    traceState: (text) => createTraceState(text),
  });
  let stopped: Promise<void> | undefined;
  return {
    target: options.exporter ? "a test exporter" : exportTarget(),
    flush: () => provider.forceFlush(),
    stop: () => {
      stopped ??= (async () => {
        disableTracing();
        // Spans that cannot be sent now are lost, with a line: the process stops all the same.
        await provider.shutdown().catch((err: unknown) => {
          options.log.warn({ err }, "traces: the last spans were not sent");
        });
        trace.disable();
        propagation.disable();
        diag.disable();
      })();
      return stopped;
    },
  };
}

/** The URL spans are sent to, as the exporter works it out. */
function exportTarget(): string {
  const traces = getStringFromEnv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
  if (traces) return traces;
  const base = getStringFromEnv("OTEL_EXPORTER_OTLP_ENDPOINT") ?? "";
  return `${base.replace(/\/+$/, "")}/v1/traces`;
}

/**
 * The sampler OTEL_TRACES_SAMPLER names (with OTEL_TRACES_SAMPLER_ARG, a ratio from 0 to 1); default
 * `parentbased_always_on`: every trace is kept, unless the caller's `traceparent` says it dropped its own.
 */
function samplerFromEnv(log: TracingLog): Sampler {
  const name = getStringFromEnv("OTEL_TRACES_SAMPLER")?.toLowerCase() ?? "parentbased_always_on";
  const arg = getNumberFromEnv("OTEL_TRACES_SAMPLER_ARG");
  const ratio = () => new TraceIdRatioBasedSampler(arg !== undefined && arg >= 0 && arg <= 1 ? arg : 1);
  switch (name) {
    case "always_on":
      return new AlwaysOnSampler();
    case "always_off":
      return new AlwaysOffSampler();
    case "traceidratio":
      return ratio();
    case "parentbased_always_off":
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case "parentbased_traceidratio":
      return new ParentBasedSampler({ root: ratio() });
    case "parentbased_always_on":
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
    default:
      log.warn(
        { sampler: name },
        "OTEL_TRACES_SAMPLER names a sampler Fount does not have: parentbased_always_on is used",
      );
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
  }
}

/** The propagators OTEL_PROPAGATORS lists: `tracecontext` and `baggage` (the default), or `none`. */
function propagatorFromEnv(log: TracingLog): TextMapPropagator {
  const names = getStringListFromEnv("OTEL_PROPAGATORS") ?? ["tracecontext", "baggage"];
  const propagators: TextMapPropagator[] = [];
  for (const name of new Set(names.map((n) => n.toLowerCase()))) {
    if (name === "tracecontext") propagators.push(new W3CTraceContextPropagator());
    else if (name === "baggage") propagators.push(new W3CBaggagePropagator());
    else if (name !== "none")
      log.warn({ propagator: name }, "OTEL_PROPAGATORS names a propagator Fount does not have: left out");
  }
  return new CompositePropagator({ propagators });
}

/**
 * The SDK reports its failures (an export the collector refused or never answered) through its `diag`
 * logger, which says nothing unless given one: they go to the server's log, each at most once per
 * `repeatLogMs`, at the level OTEL_LOG_LEVEL sets (default: warnings and errors).
 */
function watchDiagnostics(log: TracingLog): void {
  const level = getStringFromEnv("OTEL_LOG_LEVEL")?.toUpperCase() ?? "WARN";
  const lastSaid = new Map<string, number>();
  const say = (raw: string, args: unknown[]) => {
    const message = readable(raw);
    const now = Date.now();
    if ((lastSaid.get(message) ?? -Infinity) > now - repeatLogMs) return;
    lastSaid.set(message, now);
    const detail = args.find((a) => a instanceof Error) ?? (args.length > 0 ? args : undefined);
    log.warn(detail === undefined ? {} : { err: detail }, `traces: ${message}`);
  };
  diag.setLogger(
    {
      error: (m, ...a) => say(m, a),
      warn: (m, ...a) => say(m, a),
      info: (m, ...a) => say(m, a),
      debug: (m, ...a) => say(m, a),
      verbose: (m, ...a) => say(m, a),
    },
    { logLevel: DiagLogLevel[level as keyof typeof DiagLogLevel] ?? DiagLogLevel.WARN },
  );
}

/**
 * The SDK's global error handler hands an error over as its JSON (stack included): the error's message is
 * what a person needs, with what failed (`connect ECONNREFUSED 127.0.0.1:4318` says where spans go).
 */
function readable(message: string): string {
  if (!message.startsWith("{")) return message;
  try {
    const parsed = JSON.parse(message) as { message?: unknown };
    if (typeof parsed.message === "string") return `spans were not sent: ${parsed.message}`;
  } catch {
    // Not JSON after all.
  }
  return message;
}
