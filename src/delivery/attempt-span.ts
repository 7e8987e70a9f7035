/**
 * The span of one delivery attempt: an HTTP client span for a webhook or workflow (named and described
 * as the OpenTelemetry semantic conventions describe one), an internal one for a listener source, whose
 * run is its child. Its parent is the span the delivery's event was stored under (`Delivery.trace`), so
 * each attempt, even one made hours later or on another node, belongs to the trace of the hit or run
 * that made the event; an HTTP attempt sends its own span on as `traceparent`. Made only while `tracing.on`.
 */
import type { Delivery } from "../domain/types.ts";
import { contextFromText, failSpan, type Span, spanKind, startSpan } from "../tracing.ts";
import type { AttemptOutcome } from "./outcome.ts";

/** What an attempt's span says of its delivery. */
interface AttemptOf {
  /** The delivery's ID. */
  id: string;
  emitterId: string;
  eventId: string;
  /** 1 for the first attempt. */
  attempt: number;
  /** `Delivery.trace`. */
  trace?: string | undefined;
}

function fountAttributes(d: AttemptOf): Record<string, string | number> {
  return {
    "fount.delivery_id": d.id,
    "fount.event_id": d.eventId,
    "fount.source_id": d.emitterId,
    "fount.attempt": d.attempt,
  };
}

/**
 * The URL as a span may show it: without credentials or query values, which may be secrets (the
 * conventions' redaction of `url.full`), nor a fragment.
 */
function shownUrl(url: URL): string {
  const shown = new URL(url.href);
  if (shown.username) shown.username = "REDACTED";
  if (shown.password) shown.password = "REDACTED";
  for (const name of new Set(shown.searchParams.keys())) shown.searchParams.set(name, "REDACTED");
  shown.hash = "";
  return shown.href;
}

/** Starts the span of an HTTP attempt (a POST to `url`). */
export function startHttpAttempt(d: AttemptOf & { url: string }): Span {
  const attributes: Record<string, string | number> = {
    "http.request.method": "POST",
    ...fountAttributes(d),
  };
  const url = URL.parse(d.url);
  if (url) {
    attributes["url.full"] = shownUrl(url);
    attributes["server.address"] = url.hostname;
    attributes["server.port"] = Number(url.port) || (url.protocol === "https:" ? 443 : 80);
  }
  if (d.attempt > 1) attributes["http.request.resend_count"] = d.attempt - 1;
  return startSpan("POST", spanKind.client, attributes, contextFromText(d.trace));
}

/** Starts the span of an attempt to a listener source: its run is the span's child. */
export function startSourceAttempt(d: Delivery): Span {
  const attributes = {
    ...fountAttributes({ ...d, attempt: d.attempts + 1 }),
    "fount.listener_id": d.listenerId,
  };
  return startSpan("fount.deliver", spanKind.internal, attributes, contextFromText(d.trace));
}

/** `network error: ECONNREFUSED …` (http-sender.ts): the error's code. */
const networkCode = /^network error: ([A-Z][A-Z0-9_]+) /;

/**
 * Ends an attempt's span with its outcome (`fount.outcome`: succeeded, retry, failed, release). A failure
 * is named in `error.type` by what the conventions ask: the HTTP status (4xx and 5xx are failures of a
 * client span), else the failure's code, `timeout`, or the network error's code.
 */
export function endAttempt(span: Span, outcome: AttemptOutcome): void {
  span.setAttribute("fount.outcome", outcome.kind);
  if (outcome.kind !== "release" && outcome.statusCode !== undefined)
    span.setAttribute("http.response.status_code", outcome.statusCode);
  if (outcome.kind === "retry" || outcome.kind === "failed") {
    const status = outcome.statusCode;
    const type =
      status !== undefined && status >= 400
        ? String(status)
        : outcome.kind === "failed"
          ? outcome.code
          : outcome.error.startsWith("timed out")
            ? "timeout"
            : (networkCode.exec(outcome.error)?.[1] ?? "_OTHER");
    failSpan(span, type, outcome.error);
  }
  span.end();
}
