/**
 * The one error catalogue: every error Fount answers with has a stable `code`, an HTTP status and a
 * default message. `docs/errors.md` lists the same table; test/errors.test.ts keeps the two in step.
 */
export const errorCatalogue = {
  invalid_parameter: { status: 400, message: "A parameter is missing or invalid" },
  invalid_json: { status: 400, message: "The request body is not valid JSON" },
  json_too_deep: { status: 400, message: "The JSON body nests deeper than 128 levels" },
  invalid_cursor: { status: 400, message: "The pagination cursor is not valid" },
  unauthorized: { status: 401, message: "Missing or unknown API key" },
  forbidden: { status: 403, message: "This API key lacks the role for this operation" },
  csrf_rejected: { status: 403, message: "A cookie-signed request lacks the console's header" },
  not_found: { status: 404, message: "No such resource" },
  method_not_allowed: { status: 405, message: "Method not allowed on this path" },
  request_timeout: {
    status: 408,
    message: "The request did not arrive whole in time (FOUNT_REQUEST_TIMEOUT_MS, FOUNT_HEADERS_TIMEOUT_MS)",
  },
  conflict: { status: 409, message: "The resource conflicts with an existing one" },
  too_many_resources: {
    status: 409,
    message: "The account has as many of these as one account may have (FOUNT_MAX_*_PER_OWNER)",
  },
  component_quota_exceeded: {
    status: 409,
    message:
      "The account's saved components take all the space it may use (FOUNT_MAX_COMPONENT_BYTES_PER_OWNER)",
  },
  payload_too_large: { status: 413, message: "The request body is too large" },
  unsupported_media_type: { status: 415, message: "The request body must be application/json" },
  wrong_origin: {
    status: 421,
    message: "This origin does not serve that: source endpoints and the API have origins of their own",
  },
  component_invalid: { status: 422, message: "The component code does not load or validate" },
  package_install_failed: {
    status: 422,
    message: "A package imported by the component could not be installed",
  },
  props_invalid: { status: 422, message: "The configured props do not match the component" },
  not_deployable: { status: 422, message: "This component cannot be deployed as a source" },
  hook_failed: { status: 422, message: "A lifecycle hook of the component failed" },
  rate_limited: { status: 429, message: "Too many requests" },
  quota_exceeded: { status: 429, message: "The daily quota of this account is used up" },
  auth_throttled: {
    status: 429,
    message: "Too many requests with a wrong API key from this address; wait before trying again",
  },
  internal: { status: 500, message: "Internal server error" },
  component_error: { status: 500, message: "The component threw an error" },
  shutting_down: { status: 503, message: "The server is shutting down" },
  lease_lost: {
    status: 503,
    message: "Another node took this source over while it ran (this node stalled); the run was not stored",
  },
  node_unreachable: {
    status: 503,
    message: "The node running this source stopped answering during the request; retry shortly",
  },
  store_unavailable: {
    status: 503,
    message: "The server cannot reach its database; the request was not completed, retry shortly",
  },
} as const satisfies Record<string, { status: number; message: string }>;

export type ErrorCode = keyof typeof errorCatalogue;

/** An error meant for the API caller: its code picks status and default message from the catalogue. */
export class AppError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly details: Record<string, unknown> | undefined;
  readonly headers: Record<string, string> | undefined;

  constructor(
    code: ErrorCode,
    message?: string,
    options: { details?: Record<string, unknown>; cause?: unknown; headers?: Record<string, string> } = {},
  ) {
    super(message ?? errorCatalogue[code].message, { cause: options.cause });
    this.name = "AppError";
    this.code = code;
    this.status = errorCatalogue[code].status;
    this.details = options.details;
    this.headers = options.headers;
  }

  toJSON(): { error: string; code: ErrorCode; details?: Record<string, unknown> } {
    return this.details
      ? { error: this.message, code: this.code, details: this.details }
      : { error: this.message, code: this.code };
  }
}

/**
 * Why a hit whose client went away before its run started was dropped: nobody hears it but the log
 * line, and nothing of it ran or counts in the quota. Thrown by the runner and by the executor pool,
 * whichever finds it first.
 */
export const clientLeft = (): AppError =>
  new AppError("invalid_parameter", "The client went away before the hit's run started; it did not run");

/** Shorthand for the commonest error: a named field is missing or invalid. */
export function invalidParameter(field: string, message: string): AppError {
  return new AppError("invalid_parameter", message, { details: { field } });
}

export function notFound(what: string, id?: string): AppError {
  return new AppError("not_found", id ? `${what} ${id} not found` : `${what} not found`);
}

/** Errors cross process boundaries (sandbox IPC) as plain objects; this normalises anything thrown. */
export interface SerializedError {
  code: string;
  message: string;
  name?: string;
  stack?: string;
  data?: Record<string, unknown>;
}

export function serializeError(err: unknown, fallbackCode = "error"): SerializedError {
  if (err instanceof Error) {
    const own = (err as Error & { code?: unknown }).code;
    const code = typeof own === "string" ? own : fallbackCode;
    return { code, message: err.message, name: err.name, stack: err.stack };
  }
  return { code: fallbackCode, message: typeof err === "string" ? err : safeString(err) };
}

function safeString(value: unknown): string {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}
