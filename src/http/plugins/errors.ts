/** Turns anything thrown into the error body of decisions.md, without leaking internals from a 5xx. */
import type { Socket } from "node:net";
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { AppError, type ErrorCode } from "../../errors.ts";
import { isStoreUnavailable } from "../../storage/health.ts";
import { noteErrorAnswer } from "../request-log.ts";

/**
 * `Retry-After` of a `store_unavailable` answer, in seconds: the store is probed every second while it
 * is lost, and a database that restarts is usually back within a few.
 */
export const storeRetryAfterSeconds = 5;

const byStatus: Record<number, ErrorCode> = {
  400: "invalid_parameter",
  401: "unauthorized",
  403: "forbidden",
  404: "not_found",
  405: "method_not_allowed",
  409: "conflict",
  413: "payload_too_large",
  415: "unsupported_media_type",
  422: "component_invalid",
  429: "rate_limited",
  503: "shutting_down",
};

type ValidationItem = NonNullable<FastifyError["validation"]>[number];

/** The field a schema error is about, as the client named it. */
function fieldOf(v: ValidationItem): string {
  const params = v.params as Record<string, unknown>;
  const base = v.instancePath.replace(/^\//, "").replaceAll("/", ".");
  const extra = (params.missingProperty ?? params.additionalProperty) as string | undefined;
  return [base, extra].filter(Boolean).join(".") || "body";
}

export function toAppError(err: unknown): AppError {
  if (err instanceof AppError) return err;
  // Plugins that must throw their own error type (rate limiting) carry ours along.
  const carried = (err as { appError?: unknown } | null)?.appError;
  if (carried instanceof AppError) return carried;
  if (isStoreUnavailable(err)) {
    return new AppError("store_unavailable", undefined, {
      cause: err,
      headers: { "retry-after": String(storeRetryAfterSeconds) },
    });
  }
  const e = err as FastifyError & { statusCode?: number };
  if (e.validation && e.validation.length > 0) {
    const v = e.validation[0]!;
    const field = fieldOf(v);
    const params = v.params as Record<string, unknown>;
    const message =
      v.keyword === "additionalProperties"
        ? `Unknown parameter ${field}`
        : v.keyword === "required"
          ? `Missing required parameter ${field}`
          : `Parameter ${field} ${v.message ?? "is invalid"}`;
    return new AppError("invalid_parameter", message, {
      details: { field, rule: v.keyword, ...(params.allowedValues ? { allowed: params.allowedValues } : {}) },
    });
  }
  switch (e.code) {
    case "FST_ERR_BAD_URL":
      return new AppError("invalid_parameter", "The URL path is not validly percent-encoded", {
        details: { field: "path" },
      });
    case "FST_ERR_MAX_PARAM_LENGTH":
      return new AppError("invalid_parameter", "A path parameter is too long", {
        details: { field: "path" },
      });
    case "FST_ERR_CTP_INVALID_MEDIA_TYPE":
      return new AppError("unsupported_media_type");
    case "FST_ERR_CTP_BODY_TOO_LARGE":
      return new AppError("payload_too_large");
    case "FST_ERR_CTP_INVALID_JSON_BODY":
    case "FST_ERR_CTP_EMPTY_JSON_BODY":
      return new AppError("invalid_json");
  }
  if (e instanceof SyntaxError) return new AppError("invalid_json", invalidJsonMessage(e));
  const status = e.statusCode;
  if (status && status >= 400 && status < 500) {
    return new AppError(byStatus[status] ?? "invalid_parameter", e.message || undefined, { cause: err });
  }
  return new AppError("internal", undefined, { cause: err });
}

/**
 * What a JSON body's parse error says: where it failed, never the text around it, which V8 quotes (a key
 * or a token sent unquoted reached the answer and the request's log line: `..."api_key": fnt_Vr09al8"...`).
 */
export function invalidJsonMessage(err: Error): string {
  const at = /at position \d+(?: \(line \d+ column \d+\))?/.exec(err.message)?.[0];
  return `The request body is not valid JSON${at ? ` (${at})` : ""}`;
}

/** Sends `err` as the answer; `thrown`: what failed, for the request's log line (http/request-log.ts). */
export function sendError(reply: FastifyReply, err: AppError, thrown?: unknown): FastifyReply {
  noteErrorAnswer(reply, err.code, err.message, thrown);
  if (err.headers) reply.headers(err.headers);
  return reply.code(err.status).type("application/json; charset=utf-8").send(err.toJSON());
}

export function registerErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((err, _request: FastifyRequest, reply) => {
    const appError = toAppError(err);
    // Logged once answered, in the request's one line (http/request-log.ts), which keeps what was thrown
    // for a 5xx of Fount's own.
    return sendError(reply, appError, appError.status >= 500 ? err : undefined);
  });
}

/**
 * For the Fastify option `frameworkErrors`: errors the router raises before any hook runs (a path that
 * is not valid percent-encoding, a parameter over `maxParamLength`) get the catalogue body too.
 */
export function frameworkErrors(err: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  reply.header("x-request-id", request.id);
  sendError(reply, toAppError(err));
}

const statusTexts: Record<number, string> = { 408: "Request Timeout", 413: "Payload Too Large" };

/**
 * For the Fastify option `clientErrorHandler`: requests Node's HTTP parser refuses before Fastify sees
 * them (request heads over 16 KB, malformed HTTP, a request that did not arrive in time) get a catalogue
 * body instead of Fastify's default one.
 */
export function clientErrorHandler(err: NodeJS.ErrnoException, socket: Socket): void {
  if (err.code === "ECONNRESET" || socket.destroyed) return;
  const appError =
    err.code === "HPE_HEADER_OVERFLOW"
      ? new AppError("payload_too_large", "The request line and headers are too large (at most 16 KB)")
      : err.code === "ERR_HTTP_REQUEST_TIMEOUT"
        ? new AppError("request_timeout")
        : new AppError("invalid_parameter", "The request is not valid HTTP");
  const body = JSON.stringify(appError.toJSON());
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${appError.status} ${statusTexts[appError.status] ?? "Bad Request"}\r\n` +
        `Content-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
        `Connection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}
