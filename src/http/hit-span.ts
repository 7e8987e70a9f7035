/**
 * The span of one hit of a source endpoint (routes/endpoints.ts), named and described as the OpenTelemetry
 * semantic conventions describe an HTTP server span, plus Fount's own attributes. Its parent is the span
 * the caller named in `traceparent` (honoured as the caller's propagator wrote it), or, for a hit another
 * node sent on, that node's span, carried over the node link. Made only while `tracing.on`.
 */
import type { IncomingHttpHeaders } from "node:http";
import { contextFromText, failSpan, parentFromHeaders, type Span, spanKind, startSpan } from "../tracing.ts";

/** The methods the conventions name; any other is `_OTHER`, with the method as sent beside it. */
const knownMethods = new Set([
  "CONNECT",
  "DELETE",
  "GET",
  "HEAD",
  "OPTIONS",
  "PATCH",
  "POST",
  "PUT",
  "TRACE",
]);

/** Every hit of a source endpoint has this route, whatever its sub-path. */
const route = "/e/{endpoint_id}";

/** A hit as endpoints.ts holds it. */
export interface TracedHit {
  method: string;
  /** The request target: `/e/{id}[/path][?query]`. */
  url: string;
  headers: IncomingHttpHeaders;
  /**
   * Sent on by another node of the cluster: it runs here, never going on to a third, or, when this node
   * does not run its source, is handed back through this, with the node it runs on if this one knows.
   */
  elsewhere: ((to: string | undefined) => void) | undefined;
  /** Sent on by another node: the span it was sent from (`contextText`), when that node traces. */
  trace?: string | undefined;
}

/**
 * Starts the span of `hit`. Its parent: the span another node sent it from, else the one the request's
 * headers name. The query string is left out of the attributes (it may carry a caller's secrets), and so
 * is the body. A hit handed back to the node that sent it (`elsewhere`) ends its span too, unanswered
 * here: its `elsewhere` is wrapped to do so.
 */
export function startHitSpan(hit: TracedHit): Span {
  const forwarded = hit.elsewhere !== undefined;
  const method = knownMethods.has(hit.method) ? hit.method : "_OTHER";
  const query = hit.url.indexOf("?");
  const host = hit.headers.host;
  const colon = host ? host.lastIndexOf(":") : -1;
  const attributes: Record<string, string | number | boolean> = {
    "http.request.method": method,
    "http.route": route,
    "url.path": query === -1 ? hit.url : hit.url.slice(0, query),
    "url.scheme": hit.headers["x-forwarded-proto"] === "https" ? "https" : "http",
  };
  if (method === "_OTHER") attributes["http.request.method_original"] = hit.method;
  if (host) {
    // `host:port`, `[v6]:port`, or a name alone.
    const named = colon > host.lastIndexOf("]") && colon !== -1;
    attributes["server.address"] = named ? host.slice(0, colon) : host;
    if (named) attributes["server.port"] = Number(host.slice(colon + 1));
  }
  const agent = hit.headers["user-agent"];
  if (agent) attributes["user_agent.original"] = agent;
  if (forwarded) attributes["fount.forwarded"] = true;
  const parent = contextFromText(hit.trace) ?? parentFromHeaders(hit.headers);
  const span = startSpan(`${method} ${route}`, spanKind.server, attributes, parent);
  const handBack = hit.elsewhere;
  if (handBack)
    hit.elsewhere = (to) => {
      span.setAttribute("fount.handed_back", true);
      span.end();
      handBack(to);
    };
  return span;
}

/**
 * Ends the hit's span with the status it was answered with; a 5xx is a failure of the server (a 4xx is
 * the caller's, per the conventions for server spans), named by its catalogue `code` when there is one.
 */
export function endHitSpan(span: Span, status: number, code: string | undefined): void {
  span.setAttribute("http.response.status_code", status);
  if (status >= 500) failSpan(span, code ?? String(status));
  span.end();
}
