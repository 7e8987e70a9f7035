/**
 * The spans of one invocation (`fount.run`, from its call to its commit's end) and of its commit
 * (`fount.commit`, from the commit's submission to its transaction's end). A run's parent is what
 * triggered it: an endpoint hit's span, a delivery attempt's; a timer's, a manual run's or a hook's run
 * starts a trace. The commit's span is the one routing writes with each delivery of the events it stores
 * (`Delivery.trace`), so that their attempts continue the trace. Made only while `tracing.on`.
 */
import { contextText, failSpan, type Span, type SpanContext, spanKind, startSpan } from "../../tracing.ts";

/** Starts the span of a run of `sourceId` (`trigger`: http, timer, manual, subscription, hook). */
export function startRunSpan(sourceId: string, trigger: string, parent: SpanContext | undefined): Span {
  return startSpan(
    "fount.run",
    spanKind.internal,
    { "fount.source_id": sourceId, "fount.trigger": trigger },
    parent,
  );
}

/**
 * Ends a run's (or a commit's) span: `error`, the error the run ended with, or what was thrown. Its code
 * only: what a component throws often quotes what an API answered it, and leaves the server for the
 * trace backend with nothing else of the run (docs/operations.md, "What leaves the server").
 */
export function endRunSpan(span: Span, error?: { code?: unknown }): void {
  if (error) failSpan(span, typeof error.code === "string" ? error.code : "_OTHER");
  span.end();
}

/**
 * A commit's span under `run`, and its context as text (`contextText`): what the commit's events are
 * stored with, for routing to keep with each delivery.
 */
export function startCommitSpan(run: Span, sourceId: string): { span: Span; trace: string } {
  const span = startSpan(
    "fount.commit",
    spanKind.internal,
    { "fount.source_id": sourceId },
    run.spanContext(),
  );
  return { span, trace: contextText(span.spanContext()) };
}

/** Ends a commit's span once the commit landed (`eventIds`: the emits it stored) or failed (`error`). */
export function endCommitSpan(
  span: Span,
  eventIds: string[] | undefined,
  error?: { code?: unknown; message?: unknown },
): void {
  if (eventIds) span.setAttribute("fount.event_ids", eventIds);
  endRunSpan(span, error);
}
