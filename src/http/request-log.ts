/**
 * What a request leaves in the server's log: one line once it is answered. At debug when it succeeded or
 * was refused (4xx is the client's doing, and a storm of 401s or 429s must not flood the log); at info
 * when it failed for a cause that has a line of its own where it is found (the store lost, shutdown, a
 * component that threw, …); at error for any other 5xx, with what was thrown and its stack; a 5xx that
 * nothing threw (a readiness probe's 503, a component's own 500 answer) at debug. Fastify's own
 * pair of lines per request at info ("incoming request", "request completed") is replaced through its
 * `logController`; source endpoints, answered outside Fastify, log through `logAnswer` the same way.
 */
import { type FastifyBaseLogger, type FastifyReply, type FastifyRequest, LogController } from "fastify";

/** An answered request, as its log line tells it. */
export interface Answered {
  method: string;
  /** The request target; its query values are left out of the line (they may carry tokens). */
  url: string;
  statusCode: number;
  durationMs: number;
  /** The catalogue code of an error answer (src/errors.ts). */
  code?: string;
  /** The error answer's message, as the client got it. */
  message?: string;
  /** What was thrown, for a failure of Fount's own: logged with its stack. */
  err?: unknown;
  /** Run by another node, which logged its failure: a line at debug here. */
  ranElsewhere?: boolean;
  /** More fields for the line (the request ID, where the logger does not carry it). */
  fields?: Record<string, unknown>;
}

/**
 * 5xx codes whose cause has a line of its own where it is found (the store lost, shutdown, a component
 * that threw, a source taken over by another node, a node that went away): their requests are logged at
 * info, without what was thrown.
 */
const loggedWhereFound = new Set([
  "store_unavailable",
  "shutting_down",
  "component_error",
  "lease_lost",
  "node_unreachable",
]);

/** pino's level numbers; `silent` is above them all. */
const levelValues: Record<string, number> = {
  trace: 10,
  debug: 20,
  info: 30,
  warn: 40,
  error: 50,
  fatal: 60,
};

function enabled(logger: FastifyBaseLogger, level: keyof typeof levelValues): boolean {
  return (levelValues[logger.level] ?? Number.POSITIVE_INFINITY) <= levelValues[level]!;
}

/** A request target without its query values: `/v1/x?limit=…&cursor=…`. */
export function loggedUrl(url: string): string {
  const q = url.indexOf("?");
  if (q === -1) return url;
  const names = url
    .slice(q + 1)
    .split("&")
    .filter(Boolean)
    .map((pair) => `${pair.split("=", 1)[0]}=…`);
  return `${url.slice(0, q)}?${names.join("&")}`;
}

/** The level of an answer's line (see the file's opening comment). */
export function answerLevel(
  a: Pick<Answered, "statusCode" | "code" | "err">,
): "debug" | "info" | "warn" | "error" {
  if (a.statusCode >= 500) {
    // A 5xx that nothing threw is an answer given on purpose: /readyz while the store is away (whose loss
    // has its own line), or a component's own `$respond({status: 500})`. Neither is Fount failing.
    if (a.code === undefined && a.err === undefined) return "debug";
    return a.code !== undefined && loggedWhereFound.has(a.code) ? "info" : "error";
  }
  // Answered below 500 but the response itself failed (Fastify's reply `error` event).
  return a.err !== undefined ? "warn" : "debug";
}

/** Writes the one line of an answered request. */
export function logAnswer(logger: FastifyBaseLogger, a: Answered): void {
  const level = answerLevel(a);
  if (!enabled(logger, level)) return;
  const url = loggedUrl(a.url);
  const durationMs = Math.round(a.durationMs);
  logger[level](
    {
      ...a.fields,
      method: a.method,
      url,
      statusCode: a.statusCode,
      durationMs,
      ...(a.code !== undefined ? { code: a.code } : {}),
      // What was thrown only with a failure of Fount's own: the others' causes are logged where found.
      ...(a.err !== undefined && level !== "info" ? { err: a.err } : {}),
    },
    `${a.method} ${url} answered ${a.statusCode} in ${durationMs} ms${a.message ? `: ${a.message}` : ""}`,
  );
}

/** The error answer a reply sent, noted by `sendError` for the line written once it is answered. */
const errorAnswers = new WeakMap<FastifyReply, { code: string; message: string; err?: unknown }>();

/** Notes the error answer of `reply` (with what was thrown, for a failure of Fount's own). */
export function noteErrorAnswer(reply: FastifyReply, code: string, message: string, err?: unknown): void {
  errorAnswers.set(reply, err === undefined ? { code, message } : { code, message, err });
}

/** Fastify's request lines, as the file's opening comment says. */
export class RequestLogController extends LogController {
  override incomingRequest(request: FastifyRequest): void {
    // Only at trace: with LOG_LEVEL=trace, a request that never completes still shows.
    if (enabled(request.log, "trace"))
      request.log.trace({ method: request.method, url: loggedUrl(request.url) }, "incoming request");
  }

  override requestCompleted(
    error: Error | null | undefined,
    request: FastifyRequest,
    reply: FastifyReply,
  ): void {
    const noted = errorAnswers.get(reply);
    logAnswer(reply.log, {
      method: request.method,
      url: request.url,
      statusCode: reply.statusCode,
      durationMs: reply.elapsedTime,
      ...noted,
      ...(error ? { err: error } : {}),
    });
  }

  override streamError(error: Error, request: FastifyRequest, reply: FastifyReply): void {
    // A client that goes away mid-answer (a closed tab on an SSE stream) is routine.
    if ((error as NodeJS.ErrnoException).code === "ERR_STREAM_PREMATURE_CLOSE")
      reply.log.debug(
        { statusCode: reply.statusCode },
        "the client closed the connection before the answer ended",
      );
    else super.streamError(error, request, reply);
  }
}
