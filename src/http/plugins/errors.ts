/** Turns anything thrown into the error body of decisions.md, without leaking internals from a 5xx. */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { AppError, type ErrorCode } from "../../errors.ts";

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
    case "FST_ERR_CTP_INVALID_MEDIA_TYPE":
      return new AppError("unsupported_media_type");
    case "FST_ERR_CTP_BODY_TOO_LARGE":
      return new AppError("payload_too_large");
    case "FST_ERR_CTP_INVALID_JSON_BODY":
    case "FST_ERR_CTP_EMPTY_JSON_BODY":
      return new AppError("invalid_json");
  }
  if (e instanceof SyntaxError)
    return new AppError("invalid_json", `The request body is not valid JSON: ${e.message}`);
  const status = e.statusCode;
  if (status && status >= 400 && status < 500) {
    return new AppError(byStatus[status] ?? "invalid_parameter", e.message || undefined, { cause: err });
  }
  return new AppError("internal", undefined, { cause: err });
}

export function sendError(reply: FastifyReply, err: AppError): FastifyReply {
  if (err.headers) reply.headers(err.headers);
  return reply.code(err.status).type("application/json; charset=utf-8").send(err.toJSON());
}

export function registerErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((err, request: FastifyRequest, reply) => {
    const appError = toAppError(err);
    if (appError.status >= 500) request.log.error({ err }, "request failed");
    else request.log.info({ code: appError.code, msg: appError.message }, "request refused");
    return sendError(reply, appError);
  });
}
