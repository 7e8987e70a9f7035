/**
 * Traces (OpenTelemetry): the one switch every span is made behind, and what the code that makes spans
 * needs, low enough for the domain, delivery and HTTP code to import. Traces are wanted when an OTLP
 * endpoint is set (`tracesWanted`); only then does main.ts load the SDK (tracing-sdk.ts), which hands its
 * tracer and propagator over with `enableTracing`. Until then no OpenTelemetry module is loaded (this
 * file imports only their types), and each place that could make a span tests `tracing.on` first, so
 * that with tracing off a hit, a run and a delivery cost what they cost before (docs/operations.md, *Traces*).
 *
 * Span contexts cross between processes in two ways: over HTTP in the headers the propagator reads and
 * writes (an incoming hit's `traceparent`, a webhook delivery's), and inside Fount (a delivery row, a hit
 * forwarded to another node) as text in the W3C form (`contextText`), whatever propagator is set.
 */
import type {
  Attributes,
  Context,
  Span,
  SpanContext,
  SpanKind,
  TextMapPropagator,
  Tracer,
  TraceState,
} from "@opentelemetry/api";

export type { Span, SpanContext };

/** What the SDK setup (tracing-sdk.ts) hands over: the tracer, and the API's functions spans are made with. */
export interface TracingBackend {
  tracer: Tracer;
  /** Reads and writes span contexts in HTTP headers (OTEL_PROPAGATORS; W3C `traceparent` by default). */
  propagator: TextMapPropagator;
  /** A context whose span is `parent`; without one, the root context (a span made in it starts a trace). */
  contextOf(parent: SpanContext | undefined): Context;
  /** The span context a context holds, if any. */
  spanContextOf(context: Context): SpanContext | undefined;
  /** A `tracestate` header value as the API's TraceState. */
  traceState(text: string): TraceState;
}

let backend: TracingBackend | undefined;

/**
 * Whether spans are made: true once the SDK is set up. Every place that makes a span tests this first and
 * builds nothing (no attributes, no span) when it is false.
 */
export const tracing = { on: false };

/** Span kinds, as the API's `SpanKind` numbers (the API is not loaded until tracing is on). */
export const spanKind = { internal: 0, server: 1, client: 2 } as const satisfies Record<string, SpanKind>;

/** The API's `SpanStatusCode.ERROR`. */
const statusError = 2;

/** From now on spans are made with `b` (tracing-sdk.ts). */
export function enableTracing(b: TracingBackend): void {
  backend = b;
  tracing.on = true;
}

/** No more spans are made (the SDK was shut down). */
export function disableTracing(): void {
  tracing.on = false;
  backend = undefined;
}

function live(): TracingBackend {
  if (!backend) throw new Error("a span was made with tracing off: test tracing.on first");
  return backend;
}

/**
 * Whether the environment asks for traces: an OTLP endpoint for them (OTEL_EXPORTER_OTLP_ENDPOINT or
 * OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), and neither OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none.
 */
export function tracesWanted(env: NodeJS.ProcessEnv = process.env): boolean {
  const endpoint = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim() || env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim();
  if (!endpoint) return false;
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === "true") return false;
  return env.OTEL_TRACES_EXPORTER?.trim().toLowerCase() !== "none";
}

/** Starts a span, the child of `parent` (or the first of a trace without one). Only when `tracing.on`. */
export function startSpan(
  name: string,
  kind: SpanKind,
  attributes: Attributes,
  parent: SpanContext | undefined,
): Span {
  const b = live();
  return b.tracer.startSpan(name, { kind, attributes }, b.contextOf(parent));
}

/**
 * Marks `span` failed: its status ERROR (with `message`, which exporters show) and `error.type`, the
 * semantic conventions' low-cardinality name of the failure (an error code, or an HTTP status).
 */
export function failSpan(span: Span, errorType: string, message?: string): void {
  span.setAttribute("error.type", errorType);
  span.setStatus(message === undefined ? { code: statusError } : { code: statusError, message });
}

/** Header names and values as Node gives them (a repeated header as an array). */
type HeaderCarrier = Record<string, string | string[] | undefined>;

const headerGetter = {
  get: (carrier: HeaderCarrier, key: string) => carrier[key],
  keys: (carrier: HeaderCarrier) => Object.keys(carrier),
};
const headerSetter = {
  set: (carrier: Record<string, string>, key: string, value: string) => {
    carrier[key] = value;
  },
};

/** The parent span a request names in its headers (`traceparent` and `tracestate`, or OTEL_PROPAGATORS' forms). */
export function parentFromHeaders(headers: HeaderCarrier): SpanContext | undefined {
  const b = live();
  return b.spanContextOf(b.propagator.extract(b.contextOf(undefined), headers, headerGetter));
}

/** Adds the headers that make `span` the parent of what the request they go with does (`traceparent`…). */
export function injectHeaders(span: SpanContext, headers: Record<string, string>): void {
  const b = live();
  b.propagator.inject(b.contextOf(span), headers, headerSetter);
}

/** A W3C `traceparent` of version 00: trace ID, span ID, flags. */
const traceparentFormat = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** A span context as text: its W3C `traceparent`, then, if it has one, a space and its `tracestate`. */
export function contextText(span: SpanContext): string {
  const parent = `00-${span.traceId}-${span.spanId}-${span.traceFlags.toString(16).padStart(2, "0")}`;
  const state = span.traceState?.serialize();
  return state ? `${parent} ${state}` : parent;
}

/**
 * The span context `contextText` wrote, as the parent of a span made in another process or later (a
 * delivery's attempt, a forwarded hit); undefined when there is none, it does not parse, or tracing is off.
 */
export function contextFromText(text: string | null | undefined): SpanContext | undefined {
  if (!text || !backend) return undefined;
  const space = text.indexOf(" ");
  const parsed = traceparentFormat.exec(space === -1 ? text : text.slice(0, space));
  if (!parsed) return undefined;
  const span: SpanContext = {
    traceId: parsed[1]!,
    spanId: parsed[2]!,
    traceFlags: Number.parseInt(parsed[3]!, 16),
    isRemote: true,
  };
  if (space !== -1) span.traceState = backend.traceState(text.slice(space + 1));
  return span;
}
