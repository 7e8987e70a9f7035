/**
 * The pool's side of requests component code sends to https://api.pipedream.com (child/realm/pipedream-api.ts):
 * it checks what the child sent (untrusted), hands it to the server's handler, which answers it as the
 * API would answer any client with the same credentials, and sends the answer back. Only paths under
 * `/v1` are answered; everything else gets the API's own 404.
 */
import { AppError } from "../../errors.ts";
import type { ToChild } from "../child/protocol.ts";
import type { ComponentApiHandler, ComponentApiRequest, ComponentApiResponse } from "../types.ts";
import { type Child, type ExecutorLogger, isObject } from "./model.ts";

/**
 * Requests one owner's components may have waiting at once; more get 429. Each is answered on the
 * server's thread, so a component looping over the API must not queue unbounded work there.
 */
export const MAX_API_REQUESTS_PER_OWNER = 32;
const METHODS = new Set(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]);
/** Bounds on what a child may send, above what Node's HTTP parser in the realm lets through anyway. */
const MAX_URL_CHARS = 16 * 1024;
const MAX_HEADERS = 200;
const MAX_HEADER_CHARS = 64 * 1024;

export class ApiRelay {
  readonly #handler: ComponentApiHandler;
  readonly #bodyLimit: number;
  readonly #send: (child: Child, message: ToChild) => void;
  readonly #logger: ExecutorLogger | undefined;
  readonly #inFlight = new Map<string, number>();

  constructor(options: {
    handler: ComponentApiHandler;
    bodyLimit: number;
    send: (child: Child, message: ToChild) => void;
    logger?: ExecutorLogger | undefined;
  }) {
    this.#handler = options.handler;
    this.#bodyLimit = options.bodyLimit;
    this.#send = options.send;
    this.#logger = options.logger;
  }

  /** A child's `api` message: every one with a numeric id gets exactly one answer. */
  onRequest(child: Child, id: unknown, raw: unknown): void {
    if (typeof id !== "number" || !Number.isSafeInteger(id)) return;
    const ownerId = child.owner.id;
    const answer = (response: ComponentApiResponse) => {
      if (!child.gone) this.#send(child, { t: "api", id, response });
    };
    const request = this.#check(raw);
    if (request instanceof AppError) {
      answer(errorResponse(request));
      return;
    }
    const running = this.#inFlight.get(ownerId) ?? 0;
    if (running >= MAX_API_REQUESTS_PER_OWNER) {
      answer(
        errorResponse(
          new AppError(
            "rate_limited",
            `More than ${MAX_API_REQUESTS_PER_OWNER} requests to https://api.pipedream.com from this account's components at once`,
            { headers: { "retry-after": "1" } },
          ),
        ),
      );
      return;
    }
    this.#inFlight.set(ownerId, running + 1);
    this.#handler(request, { ownerId })
      .catch((err: unknown) => {
        // The component learns only that it failed; the details stay in the server's log.
        this.#logger?.warn({ err, ownerId }, "a component's request to the API could not be answered");
        return errorResponse(new AppError("internal"));
      })
      .then(answer)
      .finally(() => {
        const left = (this.#inFlight.get(ownerId) ?? 1) - 1;
        if (left > 0) this.#inFlight.set(ownerId, left);
        else this.#inFlight.delete(ownerId);
      });
  }

  /** The request as the handler may take it, or the error the component gets instead. */
  #check(raw: unknown): ComponentApiRequest | AppError {
    if (!isObject(raw)) return new AppError("invalid_parameter", "Malformed request");
    const { method, url, headers, body } = raw;
    if (typeof method !== "string" || !METHODS.has(method))
      return new AppError("method_not_allowed", `${String(method)} is not answered by this API`);
    if (typeof url !== "string" || url.length > MAX_URL_CHARS || !url.startsWith("/"))
      return new AppError("invalid_parameter", "Malformed request path");
    // Dot segments (plain or %2e) resolved, as a server would, before the /v1 check.
    const parsed = new URL(url, "https://api.pipedream.com");
    if (parsed.pathname !== "/v1" && !parsed.pathname.startsWith("/v1/")) {
      return new AppError(
        "not_found",
        `No route ${method} ${parsed.pathname}: only https://api.pipedream.com/v1 is answered by this Fount`,
      );
    }
    if (!isObject(headers)) return new AppError("invalid_parameter", "Malformed request headers");
    const entries = Object.entries(headers);
    let chars = 0;
    for (const [name, value] of entries) {
      if (typeof value !== "string") return new AppError("invalid_parameter", "Malformed request headers");
      chars += name.length + value.length;
    }
    if (entries.length > MAX_HEADERS || chars > MAX_HEADER_CHARS)
      return new AppError("invalid_parameter", "Too many or too large request headers");
    // base64 of at most bodyLimit + 1 bytes (the realm cuts the body there).
    if (typeof body !== "string" || body.length > Math.ceil((this.#bodyLimit + 1) / 3) * 4)
      return new AppError("payload_too_large");
    return {
      method,
      url: parsed.pathname + parsed.search,
      headers: Object.fromEntries(entries) as Record<string, string>,
      body,
    };
  }
}

/** The API's JSON error answer, for requests refused before they reach it. */
export function errorResponse(err: AppError): ComponentApiResponse {
  return {
    status: err.status,
    headers: { "content-type": "application/json; charset=utf-8", ...err.headers },
    body: Buffer.from(JSON.stringify(err.toJSON())).toString("base64"),
  };
}
