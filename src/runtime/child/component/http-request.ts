/**
 * The value of an `http_request` prop inside the sandbox: Pipedream's request builder, the configured
 * `{url, method, headers, params, body, auth}` with an `execute()` that sends it. The request leaves
 * through the realm's own `fetch`, so the executor's egress rules apply to it as to any other
 * connection of the component. Runs in the sandboxed child: imports only node: built-ins.
 */
import { Buffer } from "node:buffer";

type Obj = Record<string, unknown>;

/** What `execute()` resolves to: the shape of an axios response, which Pipedream's components read. */
export interface HttpRequestResponse {
  status: number;
  statusText: string;
  headers: Record<string, string>;
  /** The body parsed as JSON when it is JSON, else its text (axios' default). */
  data: unknown;
}

// Taken before any component loads, so a component replacing `fetch` does not change what execute() uses.
const send = globalThis.fetch;

function isObject(value: unknown): value is Obj {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** `[{name, value}]` entries with a name (the server stores this form; blank rows are skipped). */
function fields(list: unknown): Array<[string, string]> {
  if (!Array.isArray(list)) return [];
  const out: Array<[string, string]> = [];
  for (const f of list) {
    if (isObject(f) && typeof f.name === "string" && f.name !== "") out.push([f.name, String(f.value ?? "")]);
  }
  return out;
}

function requestBody(body: unknown, headers: Headers): string | URLSearchParams | FormData | undefined {
  if (!isObject(body)) return undefined;
  const entries = fields(body.fields);
  const mode = body.mode ?? body.type ?? (entries.length > 0 ? "fields" : "raw");
  const declared = typeof body.contentType === "string" && body.contentType !== "" ? body.contentType : null;
  // A content-type header the user set wins over the body's contentType.
  if (declared && !headers.has("content-type")) headers.set("content-type", declared);
  const type = headers.get("content-type");
  if (mode === "fields") {
    if (entries.length === 0) return undefined;
    if (type?.startsWith("application/x-www-form-urlencoded")) return new URLSearchParams(entries);
    if (type?.startsWith("multipart/form-data")) {
      // fetch writes the boundary into the header itself.
      headers.delete("content-type");
      const form = new FormData();
      for (const [name, value] of entries) form.append(name, value);
      return form;
    }
    if (!type) headers.set("content-type", "application/json");
    return JSON.stringify(Object.fromEntries(entries));
  }
  if (typeof body.raw !== "string" || body.raw === "") return undefined;
  if (!type) headers.set("content-type", looksLikeJson(body.raw) ? "application/json" : "text/plain");
  return body.raw;
}

function looksLikeJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

/** Sends the request a configured value describes; rejects on a status outside 2xx, as axios does. */
export async function executeHttpRequest(config: Obj): Promise<HttpRequestResponse> {
  if (typeof config.url !== "string" || config.url === "") {
    throw Object.assign(new Error("http_request: the request has no url"), { code: "ERR_INVALID_URL" });
  }
  const method = (typeof config.method === "string" && config.method ? config.method : "GET").toUpperCase();
  const url = new URL(config.url);
  for (const [name, value] of fields(config.params)) url.searchParams.append(name, value);
  const headers = new Headers();
  for (const [name, value] of fields(config.headers)) headers.append(name, value);
  const auth = isObject(config.auth) ? config.auth : {};
  if (auth.type === "basic") {
    const pair = `${String(auth.username ?? "")}:${String(auth.password ?? "")}`;
    headers.set("authorization", `Basic ${Buffer.from(pair).toString("base64")}`);
  } else if (auth.type === "bearer") {
    headers.set("authorization", `Bearer ${String(auth.token ?? "")}`);
  }
  const body = method === "GET" || method === "HEAD" ? undefined : requestBody(config.body, headers);
  let res: Response;
  try {
    res = await send(url, { method, headers, body });
  } catch (err) {
    // fetch says only "fetch failed"; the reason (a refused address, DNS, a reset) is its cause.
    const cause = (err as { cause?: { message?: string; code?: string } }).cause;
    const reason = cause?.message ?? (err as Error).message;
    throw Object.assign(new Error(`${method} ${url.origin}${url.pathname} failed: ${reason}`), {
      code: cause?.code ?? "ERR_NETWORK",
      cause: err,
    });
  }
  const text = method === "HEAD" ? "" : await res.text();
  let data: unknown = text;
  if (text !== "") {
    try {
      data = JSON.parse(text);
    } catch {
      // Not JSON: the text, as axios leaves it.
    }
  }
  const response: HttpRequestResponse = {
    status: res.status,
    statusText: res.statusText,
    headers: Object.fromEntries(res.headers),
    data,
  };
  if (res.status < 200 || res.status > 299) {
    throw Object.assign(new Error(`Request failed with status code ${res.status}`), {
      code: res.status >= 500 ? "ERR_BAD_RESPONSE" : "ERR_BAD_REQUEST",
      status: res.status,
      response,
    });
  }
  return response;
}

/** The prop's value for `this`: a copy of the configuration, whose `execute()` sends it as it is then. */
export function httpRequestValue(configured: unknown): Obj {
  const value: Obj = isObject(configured) ? structuredClone(configured) : {};
  value.execute = () => executeHttpRequest(value);
  return value;
}
