/**
 * Generated hostile requests for every operation of the app's own `/openapi.json`, for the routes it
 * leaves out (the console's, `/metrics`, `/docs`) and for source endpoints: right and wrong methods, real
 * and broken IDs, parameters of every wrong type, huge and deeply nested values, NUL characters, odd
 * query parameters (include/exclude naming anything, unknown, repeated, huge), bodies that are not JSON
 * or not UTF-8, odd content types and Authorization headers. The stream is reproducible from its seed. `fuzz.test.ts` asserts that none gets a 5xx; `bench/soak.ts` uses
 * the same stream to watch the server's memory over a long run.
 *
 * Requests are sent with `node:http` (not fetch), so that methods, headers and bytes go out exactly as
 * generated.
 */
import http from "node:http";
import type { Operation, Schema } from "./openapi-walk.ts";

/** A seeded pseudo-random source (mulberry32): the same seed gives the same requests. */
export class Random {
  #state: number;
  constructor(seed: number) {
    this.#state = seed >>> 0;
  }
  next(): number {
    this.#state = (this.#state + 0x6d2b79f5) >>> 0;
    let t = this.#state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)]!;
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
}

/** One generated request. */
export interface FuzzRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: Buffer;
  /** What it targets, for messages: an operation label or "endpoint". */
  target: string;
  /** The base URL it goes to when not the API's: the endpoint listener's. */
  origin?: string;
}

/** What the generator needs to know about the server under test. */
export interface FuzzContext {
  ops: Operation[];
  /** A user's API key; its fixtures (`values`) fill ID parameters. */
  userKey: string;
  adminKey: string;
  /** Valid values of each operation's parameters (by label), from the user's fixtures. */
  values: Map<string, Record<string, unknown>>;
  /** Paths (`/e/<id>`) of source endpoints to hit. */
  endpoints: string[];
  /** The endpoint listener's base URL (`http://127.0.0.1:<port>`), where those paths are served. */
  endpointBase: string;
  /** Routes the OpenAPI document leaves out (openapi-walk.ts `hiddenOperations`). */
  hidden?: Operation[];
}

const methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];

const strangeStrings = [
  "",
  " ",
  "null",
  "undefined",
  "true",
  "0",
  "-1",
  "1e400",
  "NaN",
  "💥🔥",
  "\u0000",
  "\ud800",
  "../../etc/passwd",
  "%00",
  "%ZZ",
  "a,b,,c",
  "<script>alert(1)</script>",
  "' OR 1=1 --",
  "$where",
  "__proto__",
  "constructor",
  "wh_*",
  "dc_",
  "o_",
  "s-1",
  "czE",
  "czE==",
];

/** A random JSON-able value; `depth` bounds nesting except when a deep value is asked for. */
export function randomValue(r: Random, depth = 0): unknown {
  switch (r.int(depth > 2 ? 6 : 9)) {
    case 0:
      return null;
    case 1:
      return r.chance(0.5);
    case 2:
      return r.pick([0, -1, 1.5, 2 ** 53 + 1, 1e308, -1e308, r.int(1000)]);
    case 3:
      return r.pick(strangeStrings);
    case 4:
      return "x".repeat(r.pick([1, 100, 1000, 70_000]));
    case 5:
      return `s${r.int(1e9).toString(36)}`;
    case 6:
      return Array.from({ length: r.int(4) }, () => randomValue(r, depth + 1));
    case 7: {
      const out: Record<string, unknown> = {};
      for (let i = r.int(4); i > 0; i--)
        out[r.pick(["a", "b", "id", "__proto__", "x".repeat(50)])] = randomValue(r, depth + 1);
      return out;
    }
    default:
      return r.chance(0.5) ? "[".repeat(5000) + "]".repeat(5000) : undefined;
  }
}

/** JSON text nested `levels` deep (as text: building and serializing such a value would overflow). */
function deepJson(levels: number): string {
  return `${'{"a":'.repeat(levels)}1${"}".repeat(levels)}`;
}

/** A value for a parameter: usually fitting its schema, often wrong in one of many ways. */
function paramValue(r: Random, schema: Schema, valid: unknown): unknown {
  const roll = r.int(10);
  if (roll < 4 && valid !== undefined) return valid;
  if (roll < 5 && schema.enum) return r.pick(schema.enum);
  return randomValue(r);
}

/** Percent-encodes text; lone surrogates become U+FFFD (encodeURIComponent throws on them). */
function encode(text: string): string {
  return encodeURIComponent(text.toWellFormed());
}

function queryText(value: unknown): string {
  return typeof value === "string" ? value : (JSON.stringify(value) ?? "");
}

/** Encodes a path segment, sometimes leaving it raw or broken. */
function segment(r: Random, value: unknown): string {
  const text = queryText(value);
  const roll = r.int(10);
  // Unencoded, but only with characters a client can put on the request line.
  if (roll === 0) return text.replace(/[^\x21-\x7e]|[/?#%]/g, "");
  if (roll === 1) return "%E0%A4%A";
  return encode(text.slice(0, 300));
}

const contentTypes = [
  "application/json",
  "application/json; charset=utf-8",
  "application/JSON",
  "text/plain",
  "application/x-www-form-urlencoded",
  "multipart/form-data; boundary=x",
  "application/octet-stream",
  "application/json; charset=latin1",
  "",
];

function authHeader(r: Random, ctx: FuzzContext, op: Operation | undefined): string | undefined {
  const roll = r.int(20);
  if (roll < 14) return `Bearer ${op?.admin && r.chance(0.7) ? ctx.adminKey : ctx.userKey}`;
  return r.pick([
    undefined,
    "Bearer",
    "Bearer ",
    "Basic dXNlcjpwYXNz",
    `bearer ${ctx.userKey}`,
    `Bearer ${ctx.userKey}x`,
    `Bearer ${"k".repeat(600)}`,
    "Bearer fnt_00000000000000000000000000000000",
  ]);
}

/**
 * A query parameter as no route documents it: `include`/`exclude` naming any field (one a response
 * schema requires among them), unknown, repeated, holding NUL, huge, or not a name at all.
 */
function oddQuery(r: Random): string {
  const field = () => encode(r.pick(["a", "id", "data", "name", "signed_out", "user", "page_info", "", ","]));
  return r.pick([
    () => `include=${field()}`,
    () => `exclude=${field()}`,
    () => `include=${field()}&include=${field()}`,
    () => `include=${field()}&exclude=${field()}`,
    () => `unknown_xyz=${encode(r.pick(strangeStrings))}`,
    () => "limit=1&limit=2&after=x&after=y",
    () => `${r.pick(["include", "org_id", "name", "x"])}=%00`,
    () => "%00=1",
    () => `${r.pick(["include", "exclude", "q"])}=${"x".repeat(r.pick([2000, 8000]))}`,
    () => "a[b]=1&a[c][d]=2",
    () => "=&&=x&%ZZ",
  ])();
}

/** A body for an operation: its valid values mutated, or something else entirely. */
function apiBody(r: Random, op: Operation, valid: Record<string, unknown>): Buffer | undefined {
  const roll = r.int(20);
  if (roll === 0) return undefined;
  if (roll === 1) return Buffer.from(deepJson(r.pick([150, 5000])));
  if (roll === 2)
    return Buffer.from(r.pick(['{"a":', "{'a':1}", "[]", "null", "42", '"x"', "\u0000", "{}{}"]));
  if (roll === 3) return Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d]);
  if (roll === 4) return Buffer.alloc(r.pick([1024 * 1024 + 1, 200_000]), 0x20);
  const body: Record<string, unknown> = {};
  for (const p of op.params) {
    if (p.in !== "body") continue;
    if (p.name in valid && r.chance(0.8)) body[p.name] = paramValue(r, p.schema, valid[p.name]);
    else if (r.chance(0.3)) body[p.name] = randomValue(r);
  }
  if (r.chance(0.1)) body[r.pick(["unknown_xyz", "__proto__", "constructor", "include"])] = randomValue(r);
  const text = JSON.stringify(body) ?? "{}";
  return Buffer.from(r.chance(0.05) ? text.replace(/\}$/, `,"deep":${deepJson(3000)}}`) : text);
}

/** One request for an API operation. */
function apiRequest(r: Random, ctx: FuzzContext, op: Operation): FuzzRequest {
  const valid = ctx.values.get(op.label) ?? {};
  let path = op.path;
  for (const p of op.params) {
    if (p.in !== "path") continue;
    // DELETE never gets the real ID: the fixtures must survive for the rest of the run.
    const value =
      op.method === "DELETE" || !(p.name in valid) ? randomValue(r) : paramValue(r, p.schema, valid[p.name]);
    path = path.replace(`{${p.name}}`, segment(r, value) || "x");
  }
  const query: string[] = [];
  for (const p of op.params) {
    if (p.in !== "query" || !r.chance(0.4)) continue;
    const value = paramValue(r, p.schema, valid[p.name]);
    query.push(`${encode(p.name)}=${encode(queryText(value).slice(0, 2000))}`);
  }
  if (r.chance(0.1))
    query.push(
      `${r.pick(["unknown", "limit", "after", "include", "__proto__"])}=${encode(r.pick(strangeStrings))}`,
    );
  if (r.chance(0.15)) query.push(oddQuery(r));
  if (r.chance(0.05)) path += "/";
  const method = r.chance(0.06) ? r.pick(methods) : op.method;
  const headers: Record<string, string> = {};
  const auth = authHeader(r, ctx, op);
  if (auth !== undefined) headers.authorization = auth;
  let body: Buffer | undefined;
  if (op.hasBody || r.chance(0.1)) {
    body = apiBody(r, op, valid);
    if (body) headers["content-type"] = r.chance(0.85) ? "application/json" : r.pick(contentTypes);
  }
  if (r.chance(0.03)) headers["x-request-id"] = r.pick(["ok-id", "bad id!", "x".repeat(200)]);
  return {
    method,
    path: query.length ? `${path}?${query.join("&")}` : path,
    headers,
    body,
    target: op.label,
  };
}

/**
 * One request to a route the OpenAPI document leaves out. They take no documented input, so they get
 * odd queries and bodies, the console's own header most of the time (without it, its routes stop at
 * 403), and a key or none.
 */
function hiddenRequest(r: Random, ctx: FuzzContext, op: Operation): FuzzRequest {
  let path = op.path;
  for (const p of op.params) {
    const value = r.chance(0.3) ? r.pick(["app.js", "app.css", "index.html", "json"]) : randomValue(r);
    path = path.replace(`{${p.name}}`, segment(r, value) || "x");
  }
  if (r.chance(0.6)) path += `?${oddQuery(r)}`;
  const method = r.chance(0.1) ? r.pick(methods) : op.method;
  const headers: Record<string, string> = {};
  const auth = authHeader(r, ctx, op);
  if (auth !== undefined && r.chance(0.5)) headers.authorization = auth;
  if (r.chance(0.7)) headers["x-fount-console"] = r.chance(0.9) ? "1" : r.pick(["0", "true", ""]);
  let body: Buffer | undefined;
  if (op.hasBody || r.chance(0.1)) {
    const fields: Record<string, unknown> = {};
    if (r.chance(0.6))
      fields.api_key = r.chance(0.3) ? ctx.userKey : r.pick([...strangeStrings, `${ctx.userKey}\u0000`]);
    if (r.chance(0.3)) fields[r.pick(["include", "unknown_xyz", "__proto__"])] = randomValue(r);
    body = r.chance(0.8)
      ? Buffer.from(JSON.stringify(fields))
      : Buffer.from(r.pick(['{"a":', "[]", "\u0000"]));
    headers["content-type"] = r.chance(0.85) ? "application/json" : r.pick(contentTypes);
  }
  return { method, path, headers, body, target: op.label };
}

/** One request to a source endpoint: any method, sub-path, query and body. */
function endpointRequest(r: Random, ctx: FuzzContext): FuzzRequest {
  const base = r.chance(0.9)
    ? r.pick(ctx.endpoints)
    : `/e/${r.pick(["unknown0000", "", "UPPER", "x".repeat(100), "%ZZ"])}`;
  let path = base;
  if (r.chance(0.3)) path += `/${r.pick(["a", "a/b/c", "%2e%2e", "%F0%9F%92%A5", "x".repeat(500)])}`;
  if (r.chance(0.3)) path += `?${r.pick(["a=1", "a=1&a=2", "=", "%ZZ=1", "x=" + "y".repeat(2000), "q"])}`;
  const method = r.pick(methods);
  const headers: Record<string, string> = {};
  let body: Buffer | undefined;
  if (method !== "GET" && method !== "HEAD" && r.chance(0.8)) {
    const roll = r.int(8);
    body =
      roll === 0
        ? Buffer.from(deepJson(r.pick([100, 200, 5000])))
        : roll === 1
          ? Buffer.alloc(r.pick([512 * 1024 + 1, 100_000]), 0x61)
          : roll === 2
            ? Buffer.from([0xff, 0xfe, 0x00, 0x7b])
            : Buffer.from(JSON.stringify(randomValue(r)) ?? "");
    headers["content-type"] = r.pick(contentTypes);
  }
  if (method === "OPTIONS" && r.chance(0.5)) headers["access-control-request-method"] = "POST";
  if (r.chance(0.1)) headers.cookie = r.pick(["fount_session=x", "a=1; __Host-fount_session=y", "fount_"]);
  // A few go to the API's origin, which does not serve endpoints (421).
  return {
    method,
    path,
    headers,
    body,
    target: "endpoint",
    origin: r.chance(0.9) ? ctx.endpointBase : undefined,
  };
}

/**
 * The `n`th request of the stream of `seed`: a fifth go to source endpoints, a tenth of the rest to the
 * routes the OpenAPI document leaves out, the others to API operations.
 */
export function* fuzzRequests(ctx: FuzzContext, seed: number, count: number): Generator<FuzzRequest> {
  const r = new Random(seed);
  // Streams never end; they get only broken requests (the walker's stream tests cover the rest).
  const ops = ctx.ops.filter((o) => !o.streaming);
  const hidden = ctx.hidden ?? [];
  for (let i = 0; i < count; i++) {
    if (r.chance(0.2) && ctx.endpoints.length > 0) yield endpointRequest(r, ctx);
    else if (r.chance(0.1) && hidden.length > 0) yield hiddenRequest(r, ctx, r.pick(hidden));
    else yield apiRequest(r, ctx, ops[i % ops.length]!);
  }
}

/** The answer to one request: status, content type and body text (bodies of streams are not read). */
export interface FuzzAnswer {
  status: number;
  contentType: string;
  text: string;
}

/** Sends one request on `agent` and reads the whole answer. */
export function sendRaw(baseUrl: string, agent: http.Agent, req: FuzzRequest): Promise<FuzzAnswer> {
  const url = new URL(baseUrl);
  const headers = { ...req.headers };
  if (req.body !== undefined) headers["content-length"] = String(req.body.length);
  return new Promise((resolve, reject) => {
    const out = http.request(
      { host: url.hostname, port: url.port, method: req.method, path: req.path, headers, agent },
      (res) => {
        const contentType = String(res.headers["content-type"] ?? "");
        if (contentType.startsWith("text/event-stream")) {
          res.destroy();
          resolve({ status: res.statusCode ?? 0, contentType, text: "" });
          return;
        }
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () =>
          resolve({ status: res.statusCode ?? 0, contentType, text: Buffer.concat(chunks).toString("utf8") }),
        );
        res.on("error", reject);
      },
    );
    out.on("error", reject);
    out.end(req.body);
  });
}

/** Sends every request with `concurrency` at a time; calls `check` with each answer. */
export async function sendAll(
  baseUrl: string,
  requests: Iterable<FuzzRequest>,
  concurrency: number,
  check: (req: FuzzRequest, answer: FuzzAnswer) => void,
): Promise<number> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
  const iterator = requests[Symbol.iterator]();
  let sent = 0;
  const worker = async () => {
    for (let next = iterator.next(); !next.done; next = iterator.next()) {
      const req = next.value;
      let answer: FuzzAnswer;
      try {
        answer = await sendRaw(req.origin ?? baseUrl, agent, req);
      } catch {
        // The server may close a connection on a refused body (413); a new socket retries it once.
        answer = await sendRaw(req.origin ?? baseUrl, agent, req).catch((err: Error) => ({
          status: 0,
          contentType: "",
          text: `connection failed: ${err.message}`,
        }));
      }
      sent++;
      check(req, answer);
    }
  };
  try {
    await Promise.all(Array.from({ length: concurrency }, worker));
  } finally {
    agent.destroy();
  }
  return sent;
}
