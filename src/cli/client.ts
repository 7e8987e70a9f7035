/**
 * A small client for Fount's REST API: a base URL, an API key, optionally an organization to act for.
 * Error answers (`{error, code}`) become ApiError; network failures become ApiError with code
 * `network_error`, so that the CLI prints every failure the same way.
 */

/** A failed API call: the server's message and stable code, or a local one for transport failures. */
export class ApiError extends Error {
  readonly code: string;
  /** HTTP status; 0 when no answer arrived. */
  readonly status: number;
  readonly details: Record<string, unknown> | undefined;

  constructor(message: string, code: string, status: number, details?: Record<string, unknown>) {
    super(message);
    this.name = "ApiError";
    this.code = code;
    this.status = status;
    this.details = details;
  }
}

export interface ApiClientOptions {
  /** Base URL of the server, without `/v1`. */
  url: string;
  apiKey: string;
  /** Sent as `org_id` on every request, to act for that organization. */
  orgId?: string;
  userAgent?: string;
  /** Per-request time limit (default 60 s). */
  timeoutMs?: number;
}

export type Query = Record<string, string | number | boolean | string[] | undefined>;

/**
 * Bytes of an answer read at most. The largest a server sends is a page of 100 events of up to
 * FOUNT_MAX_EVENT_BYTES (1 MB by default) each, escaped as JSON; a body past this is a broken or
 * hostile server, which must not fill the memory.
 */
export const maxAnswerBytes = 128 * 1024 * 1024;
/** Pages of a list followed at most (100 items each): far more than any list of sources or webhooks. */
const maxListPages = 1000;

/** A body read up to a limit: its text, and whether it went on past the limit (or the time) and was cut. */
export interface ReadBody {
  text: string;
  cut: boolean;
}

/**
 * Reads `body` as UTF-8 text, `maxBytes` at most and, with `timeoutMs`, for that long at most; past
 * either it stops, marks the text cut and cancels the stream, so that the connection closes. Errors of
 * the stream (a timeout or abort of the request's signal, a reset) are thrown as they come.
 */
export async function readBody(
  body: ReadableStream<Uint8Array> | null,
  maxBytes: number,
  timeoutMs?: number,
): Promise<ReadBody> {
  if (body === null) return { text: "", cut: false };
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  let cut = true;
  let timer: NodeJS.Timeout | undefined;
  const expired =
    timeoutMs === undefined
      ? undefined
      : new Promise<"expired">((resolve) => {
          timer = setTimeout(() => resolve("expired"), timeoutMs);
        });
  try {
    for (;;) {
      const next = expired ? await Promise.race([reader.read(), expired]) : await reader.read();
      if (next === "expired") break;
      if (next.done) {
        cut = false;
        break;
      }
      const room = maxBytes - size;
      chunks.push(next.value.length > room ? next.value.subarray(0, room) : next.value);
      size += next.value.length;
      if (size > maxBytes) break;
    }
  } finally {
    clearTimeout(timer);
    // Stops a body that goes on (its connection closes); nothing to stop after its end.
    reader.cancel().catch(() => {});
  }
  return { text: Buffer.concat(chunks).toString("utf8"), cut };
}

export interface RequestOptions {
  query?: Query;
  /** JSON body (POST and PUT send `{}` when absent, as the API wants a JSON content type). */
  body?: unknown;
  timeoutMs?: number;
  signal?: AbortSignal;
  headers?: Record<string, string>;
}

/** The paginated envelope of list endpoints. */
export interface PageEnvelope<T> {
  page_info: { total_count: number; count: number; start_cursor: string | null; end_cursor: string | null };
  data: T[];
}

/** Checks and normalises a server URL: http(s), no trailing slash. */
export function normalizeBaseUrl(raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ApiError(`"${raw}" is not a URL (expected e.g. http://127.0.0.1:8787)`, "invalid_url", 0);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:")
    throw new ApiError(`The server URL must use http or https, not ${url.protocol}`, "invalid_url", 0);
  url.search = "";
  url.hash = "";
  return url.toString().replace(/\/+$/, "");
}

export class ApiClient {
  readonly url: string;
  readonly orgId: string | undefined;
  readonly #apiKey: string;
  readonly #userAgent: string;
  readonly #timeoutMs: number;

  constructor(options: ApiClientOptions) {
    this.url = normalizeBaseUrl(options.url);
    this.#apiKey = options.apiKey;
    this.orgId = options.orgId;
    this.#userAgent = options.userAgent ?? "fount-cli";
    // Long enough for a deploy that installs packages; a stuck server still fails eventually.
    this.#timeoutMs = options.timeoutMs ?? 60_000;
  }

  /** Full URL of an API path, with the query (and `org_id` when acting for an organization). */
  urlFor(apiPath: string, query: Query = {}): string {
    const url = new URL(this.url + apiPath);
    const all: Query = this.orgId && query.org_id === undefined ? { ...query, org_id: this.orgId } : query;
    for (const [key, value] of Object.entries(all)) {
      // A list is a repeated parameter (`where=…&where=…`).
      if (Array.isArray(value)) for (const v of value) url.searchParams.append(key, v);
      else if (value !== undefined) url.searchParams.set(key, String(value));
    }
    return url.toString();
  }

  /**
   * The raw Response of an authenticated request, for callers that read it themselves (SSE streams,
   * non-JSON bodies). Error statuses are not thrown here; transport failures are.
   */
  async fetch(method: string, apiPath: string, options: RequestOptions = {}): Promise<Response> {
    const headers: Record<string, string> = {
      authorization: `Bearer ${this.#apiKey}`,
      "user-agent": this.#userAgent,
      accept: "application/json",
      ...options.headers,
    };
    let body: string | undefined;
    if (options.body !== undefined || method === "POST" || method === "PUT") {
      body = JSON.stringify(options.body ?? {});
      headers["content-type"] = "application/json";
    }
    const signals = [options.signal].filter((s): s is AbortSignal => s !== undefined);
    const timeoutMs = options.timeoutMs ?? this.#timeoutMs;
    if (timeoutMs > 0) signals.push(AbortSignal.timeout(timeoutMs));
    try {
      return await fetch(this.urlFor(apiPath, options.query), {
        method,
        headers,
        body,
        signal: signals.length > 0 ? AbortSignal.any(signals) : undefined,
      });
    } catch (err) {
      throw this.#transportError(err, timeoutMs);
    }
  }

  /** A failure of the connection as ApiError (`timeout`, `network_error`); an abort asked for stays one. */
  #transportError(err: unknown, timeoutMs: number): unknown {
    const e = err as Error & { cause?: { code?: string; message?: string } };
    if (e.name === "TimeoutError")
      return new ApiError(`${this.url} did not answer within ${timeoutMs / 1000} s`, "timeout", 0);
    if (e.name === "AbortError") return err;
    const reason = e.cause?.code ?? e.cause?.message ?? e.message;
    return new ApiError(`Cannot reach ${this.url}: ${reason}`, "network_error", 0);
  }

  /** An API call whose answer is JSON; error answers throw ApiError. */
  async request<T = any>(method: string, apiPath: string, options: RequestOptions = {}): Promise<T> {
    const res = await this.fetch(method, apiPath, options);
    let body: ReadBody;
    try {
      // The request's time limit covers the body too (its signal ends the stream).
      body = await readBody(res.body, maxAnswerBytes);
    } catch (err) {
      throw this.#transportError(err, options.timeoutMs ?? this.#timeoutMs);
    }
    // An error answer cut short is still told by its status, below.
    if (body.cut && res.ok)
      throw new ApiError(
        `${method} ${apiPath} answered with a body over ${maxAnswerBytes / 1048576} MB; not read further`,
        "bad_response",
        res.status,
      );
    const text = body.text;
    let parsed: unknown;
    try {
      parsed = text === "" || body.cut ? undefined : JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    if (!res.ok) throw answerError(res, parsed, `${method} ${apiPath}`);
    if (text !== "" && parsed === undefined)
      throw new ApiError(
        `${method} ${apiPath} answered with a body that is not JSON`,
        "bad_response",
        res.status,
      );
    return parsed as T;
  }

  get<T = any>(apiPath: string, query?: Query): Promise<T> {
    return this.request<T>("GET", apiPath, { query });
  }

  post<T = any>(apiPath: string, body?: unknown, query?: Query): Promise<T> {
    return this.request<T>("POST", apiPath, { body, query });
  }

  put<T = any>(apiPath: string, body?: unknown, query?: Query): Promise<T> {
    return this.request<T>("PUT", apiPath, { body, query });
  }

  delete<T = any>(apiPath: string, query?: Query): Promise<T> {
    return this.request<T>("DELETE", apiPath, { query });
  }

  /**
   * Every item of a paginated list, following `end_cursor` (newest first), up to `max` items. A server
   * that answers a cursor it gave before, or more than `maxListPages` pages, is an error (`bad_response`)
   * rather than a loop without end.
   */
  async listAll<T = any>(apiPath: string, query: Query = {}, max = Number.POSITIVE_INFINITY): Promise<T[]> {
    const items: T[] = [];
    const seen = new Set<string>();
    let after: string | undefined;
    for (let pages = 0; items.length < max; pages++) {
      if (pages === maxListPages)
        throw new ApiError(
          `GET ${apiPath} went on past ${maxListPages} pages; not read further`,
          "bad_response",
          200,
        );
      // 100 is the API's largest page.
      const limit = Math.min(100, max - items.length);
      const page = await this.get<PageEnvelope<T>>(apiPath, { ...query, limit, after });
      if (!Array.isArray(page?.data))
        throw new ApiError(`GET ${apiPath} answered without a list`, "bad_response", 200);
      items.push(...page.data);
      after = page.page_info?.end_cursor ?? undefined;
      if (page.data.length < limit || after === undefined || items.length >= page.page_info.total_count)
        break;
      if (seen.has(after))
        throw new ApiError(
          `GET ${apiPath} answered the page cursor ${after} a second time; the list was not read further`,
          "bad_response",
          200,
        );
      seen.add(after);
    }
    return items;
  }
}

/**
 * The text of an error answer to a request without a time limit (a stream, an export), read for 5 s
 * and 64 KB at most, which the API's `{error, code}` never needs more of; "" when it cannot be read.
 */
export async function errorText(res: Response): Promise<string> {
  return (await readBody(res.body, 64 * 1024, 5000).catch(() => ({ text: "" }))).text;
}

/** The ApiError of an error answer: its catalogue body when it has one (`parsed`), its status otherwise. */
export function answerError(res: Response, parsed: unknown, what: string): ApiError {
  const err = parsed as { error?: unknown; code?: unknown; details?: unknown } | undefined;
  if (err && typeof err.error === "string")
    return new ApiError(
      err.error,
      typeof err.code === "string" ? err.code : `http_${res.status}`,
      res.status,
      err.details && typeof err.details === "object" ? (err.details as Record<string, unknown>) : undefined,
    );
  return new ApiError(
    `${what} answered ${res.status} ${res.statusText}`.trim(),
    `http_${res.status}`,
    res.status,
  );
}
