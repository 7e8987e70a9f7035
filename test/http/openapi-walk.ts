/**
 * Walks the running app's own OpenAPI document, so that the route-wide tests (auth, tenancy, malformed
 * input) cover every route, including ones added after these tests were written. Parameters that hold
 * IDs are filled with real resources created for a given user ("fixtures"); other parameters get sample
 * values derived from their schema.
 *
 * A new kind of resource needs either a schema pattern naming its ID prefix (`^dc_…`) and a create route
 * the generic maker can call (POST on the collection), or an entry in `fixtureMakers`; a parameter that
 * needs a hand-picked sample value goes in `sampleOverrides`.
 */
import assert from "node:assert/strict";
import { errorCatalogue } from "../../src/errors.ts";
import { type ApiResponse, apiClient, type RequestOptions, type TestServer } from "../helpers.ts";

/** The subset of JSON Schema the walker reads. */
export interface Schema {
  type?: string | string[];
  pattern?: string;
  format?: string;
  enum?: unknown[];
  const?: unknown;
  anyOf?: Schema[];
  oneOf?: Schema[];
  properties?: Record<string, Schema>;
  required?: string[];
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  default?: unknown;
}

export interface Param {
  name: string;
  in: "path" | "query" | "body";
  required: boolean;
  schema: Schema;
}

export interface Operation {
  method: string;
  /** The OpenAPI path template, e.g. `/v1/webhooks/{id}`. */
  path: string;
  label: string;
  params: Param[];
  /** Takes a JSON body (has a requestBody). */
  hasBody: boolean;
  /** Answers without an API key (`security: []`). */
  public: boolean;
  /** Admin API: non-admin keys get 403. */
  admin: boolean;
  /** Takes `limit`/`after`/`before`. */
  paginated: boolean;
  /** Answers with a stream (`text/event-stream`) that does not end. */
  streaming: boolean;
}

export interface WalkUser {
  id: string;
  key: string;
}

const methods = ["get", "post", "put", "patch", "delete"] as const;

/** Every operation of the running app's `/openapi.json`. */
export async function operations(server: TestServer): Promise<Operation[]> {
  const doc = await server.api("GET", "/openapi.json", { key: null });
  assert.equal(doc.status, 200, "GET /openapi.json");
  const out: Operation[] = [];
  for (const [path, item] of Object.entries(doc.body.paths as Record<string, Record<string, any>>)) {
    for (const m of methods) {
      const op = item[m];
      if (!op) continue;
      const params: Param[] = [];
      for (const p of (op.parameters ?? []) as any[]) {
        if (p.in === "path" || p.in === "query")
          params.push({ name: p.name, in: p.in, required: Boolean(p.required), schema: p.schema ?? {} });
      }
      const body = op.requestBody?.content?.["application/json"]?.schema as Schema | undefined;
      for (const [name, schema] of Object.entries(body?.properties ?? {})) {
        params.push({ name, in: "body", required: (body?.required ?? []).includes(name), schema });
      }
      const names = new Set(params.map((p) => p.name));
      out.push({
        method: m.toUpperCase(),
        path,
        label: `${m.toUpperCase()} ${path}`,
        params,
        hasBody: body !== undefined,
        public: Array.isArray(op.security) && op.security.length === 0,
        admin: path.startsWith("/v1/admin/") || (op.tags ?? []).includes("admin"),
        paginated: names.has("limit") && names.has("after") && names.has("before"),
        streaming: Object.values((op.responses ?? {}) as Record<string, any>).some(
          (r) => r?.content?.["text/event-stream"] !== undefined,
        ),
      });
    }
  }
  return out;
}

/**
 * The routes `/openapi.json` leaves out (the console's `/console/session`, its files, `/metrics`,
 * `/docs`, the page at `/`), read from the app's own route tree, with `{param}` for path parameters
 * and `*` as a `{wildcard}` one. They take no documented input: route-wide tests send them what they
 * send the documented ones.
 */
export function hiddenOperations(server: TestServer, documented: Operation[]): Operation[] {
  const known = new Set(documented.map((o) => o.label));
  const tree = server.built.app.printRoutes({ commonPrefix: false });
  const parents: string[] = [];
  const out: Operation[] = [];
  for (const line of tree.split("\n")) {
    const m = /^([│ ]*)(?:└── |├── )(.+?) \(([A-Z, ]+)\)$/.exec(line);
    if (!m) continue;
    const depth = m[1]!.length / 4;
    const full = (parents[depth - 1] ?? "") + m[2]!;
    parents[depth] = full;
    parents.length = depth + 1;
    const path = full
      .replace(/\/?\*$/, "/{wildcard}")
      .replace(/:(\w+)/g, "{$1}")
      .replace(/\/+/g, "/");
    for (const method of m[3]!.split(", ")) {
      if (method === "HEAD" || known.has(`${method} ${path}`)) continue;
      out.push({
        method,
        path,
        label: `${method} ${path}`,
        params: [...path.matchAll(/\{(\w+)\}/g)].map((p) => ({
          name: p[1]!,
          in: "path" as const,
          required: true,
          schema: { type: "string" },
        })),
        hasBody: method === "POST" || method === "PUT" || method === "PATCH",
        public: false,
        admin: false,
        paginated: false,
        streaming: false,
      });
    }
  }
  assert.ok(
    out.some((o) => o.path.startsWith("/console/")),
    `the console's routes were found in the route tree:\n${tree}`,
  );
  return out;
}

// ---------------------------------------------------------------------------------------------------
// Which kind of resource a parameter names

/** Collection path segments and the ID prefix of their items (for `{id}` path parameters). */
const collectionPrefixes: Record<string, string> = {
  webhooks: "wh",
  subscriptions: "sub",
  sources: "dc",
  components: "sc",
  workflows: "p",
  accounts: "apn",
  orgs: "o",
  users: "u",
  keys: "key",
  deliveries: "del",
  auto_subscriptions: "asub",
  dc: "dc", // Pipedream's stream URLs: /sse/dc/{id}/emits
};

/** Parameter names whose schema has no pattern, and the prefixes their IDs have. */
const namePrefixes: Record<string, string[]> = {
  org_id: ["o"],
  user_id: ["u"],
  owner_id: ["u"],
  key_id: ["key"],
  webhook_id: ["wh"],
  source_id: ["dc"],
  component_id: ["sc"],
  workflow_id: ["p"],
  subscription_id: ["sub"],
  emitter_id: ["dc", "p"],
  listener_id: ["dc", "p", "wh"],
};

/** Parameters named like IDs that do not name a resource. */
const notResourceIds = new Set([
  "start_id", // event IDs (`<ms>-<seq>`) of DELETE /sources/{id}/events
  "end_id",
  "last_event_id", // the SSE stream's replay point, an event ID
  "event_id", // an event of /sources/{id}/events/{event_id}: its deliveries, its replay
]);

/** The ID prefixes a parameter accepts, or undefined when it does not hold an ID. */
export function idPrefixes(op: Operation, p: Param): string[] | undefined {
  if (notResourceIds.has(p.name)) return undefined;
  const pattern = p.schema.pattern;
  const fromPattern = pattern ? /^\^(?:\(([a-z|]+)\)|([a-z]+))_/.exec(pattern) : null;
  if (fromPattern) return (fromPattern[1] ?? fromPattern[2]!).split("|");
  if (namePrefixes[p.name]) return namePrefixes[p.name];
  if (p.in === "path") {
    // `/v1/webhooks/{id}`, `/v1/components/{key}`: the segment before names the kind.
    const segments = op.path.split("/");
    const collection = segments[segments.indexOf(`{${p.name}}`) - 1] ?? "";
    if (collectionPrefixes[collection]) return [collectionPrefixes[collection]];
  }
  if (p.name === "id" || p.name.endsWith("_id")) {
    throw new Error(
      `${op.label}: cannot tell which kind of ID parameter ${p.name} holds; give its schema a pattern "^<prefix>_…"`,
    );
  }
  return undefined;
}

/** Whether the parameter accepts the glob `<prefix>_*` (subscription emitters). */
function acceptsGlob(p: Param, prefix: string): boolean {
  return p.schema.pattern !== undefined && new RegExp(p.schema.pattern).test(`${prefix}_*`);
}

/** Whether a schema admits a JSON type. */
export function admitsType(schema: Schema, type: string): boolean {
  const branches = schema.anyOf ?? schema.oneOf;
  if (branches) return branches.some((b) => admitsType(b, type));
  if (schema.type === undefined) return schema.enum === undefined && schema.const === undefined;
  const types = Array.isArray(schema.type) ? schema.type : [schema.type];
  return types.includes(type) || (type === "integer" && types.includes("number"));
}

/** The JSON types a schema names explicitly (none: it accepts anything). */
export function declaredTypes(schema: Schema): string[] {
  const branches = schema.anyOf ?? schema.oneOf;
  if (branches) return branches.flatMap(declaredTypes);
  if (schema.type === undefined) return [];
  return Array.isArray(schema.type) ? schema.type : [schema.type];
}

// ---------------------------------------------------------------------------------------------------
// Fixtures: real resources of a user, by ID prefix

export type Fixtures = Map<string, string>;

let counter = 0;
/** A name no other fixture has (usernames and orgnames are unique store-wide). */
export function unique(base: string): string {
  counter += 1;
  return `${base}-${process.pid}-${counter}`;
}

async function ok(res: Promise<ApiResponse>, what: string): Promise<any> {
  const r = await res;
  assert.ok(r.status >= 200 && r.status < 300, `${what}: ${r.status} ${r.text}`);
  return r.body;
}

interface MakerContext {
  server: TestServer;
  ops: Operation[];
  user: WalkUser;
  own: Fixtures;
}

/** Hand-written fixture makers, for kinds the generic maker cannot create (it needs the admin API). */
export const fixtureMakers: Record<string, (ctx: MakerContext) => Promise<string>> = {
  u: async ({ user }) => user.id,
  o: async ({ server, user }) =>
    (
      await ok(
        server.api("POST", "/v1/admin/orgs", { body: { orgname: unique("org"), owner_id: user.id } }),
        "create org",
      )
    ).data.id,
  key: async ({ server, user }) =>
    (
      await ok(
        server.api("POST", `/v1/admin/users/${user.id}/keys`, { body: { name: "walker" } }),
        "create key",
      )
    ).data.id,
};

/** A console session (`ses_…`) of the user: a sign-in with its key, found in its list of sessions. */
fixtureMakers.ses = async ({ server, user }) => {
  await ok(
    server.api("POST", "/console/session", {
      key: null,
      body: { api_key: user.key },
      headers: { "x-fount-console": "1" },
    }),
    "sign in",
  );
  return (await ok(server.api("GET", "/v1/users/me/sessions", { key: user.key }), "list sessions")).data[0]
    .id;
};

/** The smallest source: it emits what it is run with; one prop with options. */
export const walkerComponentCode = `export default {
  name: "Walker",
  key: "walker-source",
  version: "0.0.1",
  props: { color: { type: "string", optional: true, options: ["red", "blue"] } },
  async run(event) {
    this.$emit(event ?? {});
  },
};`;

fixtureMakers.sc = async ({ server, user }) =>
  (
    await ok(
      server.api("POST", "/v1/components", { key: user.key, body: { component_code: walkerComponentCode } }),
      "save component",
    )
  ).data.id;
fixtureMakers.dc = async (ctx) =>
  (
    await ok(
      ctx.server.api("POST", "/v1/sources", {
        key: ctx.user.key,
        body: { component_id: await ensureFixture(ctx, "sc"), name: unique("walker") },
      }),
      "deploy source",
    )
  ).data.id;

/**
 * A delivery (`del_…`) to the user's webhook fixture. The webhook is made inactive first, so that the
 * delivery stays pending and unattempted (its URL leads nowhere) and reads of it never change.
 */
fixtureMakers.del = async (ctx) => {
  const key = ctx.user.key;
  const webhook = await ensureFixture(ctx, "wh");
  const source = await ensureFixture(ctx, "dc");
  await ok(
    ctx.server.api("PUT", `/v1/webhooks/${webhook}`, { key, body: { active: false } }),
    "deactivate webhook",
  );
  await ok(
    ctx.server.api("POST", "/v1/subscriptions", { key, body: { emitter_id: source, listener_id: webhook } }),
    "subscribe webhook",
  );
  await ok(
    ctx.server.api("POST", `/v1/sources/${source}/run`, { key, body: { event: { walker: true } } }),
    "run",
  );
  const list = await ok(
    ctx.server.api("GET", `/v1/webhooks/${webhook}/deliveries`, { key }),
    "list deliveries",
  );
  return list.data[0].id;
};

/**
 * Sample values for parameters whose schema alone does not say what a valid value is. They are sent
 * whenever an operation declares the parameter, also when it is optional (one of several is required).
 */
export const sampleOverrides: Record<string, unknown> = {
  url: "https://hooks.example.com/fount",
  event_name: "default",
  component_code: walkerComponentCode,
  prop: "color",
  // POST /v1/workflows/{id}/errors: the error object needs its code.
  error: { code: "walker_error" },
  // An event ID: the walk's sources have no such event, so the routes answer 404 or an empty list.
  event_id: "1700000000000-0",
  status_code: "5xx",
};

/** The user's fixture for a prefix, created on first use. */
export async function ensureFixture(ctx: MakerContext, prefix: string): Promise<string | undefined> {
  const have = ctx.own.get(prefix);
  if (have) return have;
  let id: string | undefined;
  const maker = fixtureMakers[prefix];
  if (maker) id = await maker(ctx);
  else id = await genericMaker(ctx, prefix);
  if (id) ctx.own.set(prefix, id);
  return id;
}

/** Creates a resource by POSTing on its collection (`/v1/webhooks` for `wh`) with sample values. */
async function genericMaker(ctx: MakerContext, prefix: string): Promise<string | undefined> {
  const create = ctx.ops.find(
    (o) =>
      o.method === "POST" &&
      !o.admin &&
      collectionPrefixes[o.path.split("/").pop() ?? ""] === prefix &&
      !o.params.some((p) => p.in === "path"),
  );
  if (!create) return undefined;
  const values = await ownValues(ctx, create);
  if (!values) return undefined;
  const res = await send(ctx.server, create, ctx.user.key, toRequest(create, values));
  const id = res.body?.data?.id;
  if (res.status !== 200 || typeof id !== "string" || !id.startsWith(`${prefix}_`)) {
    throw new Error(
      `Cannot create a "${prefix}_" fixture with ${create.label} (${res.status} ${res.text.slice(0, 200)}); ` +
        `add a maker to fixtureMakers in test/http/openapi-walk.ts`,
    );
  }
  return id;
}

/** A valid value of an ID parameter from the user's own resources (or a glob it accepts). */
export async function ownId(ctx: MakerContext, op: Operation, p: Param): Promise<string | undefined> {
  const prefixes = idPrefixes(op, p) ?? [];
  for (const prefix of prefixes) {
    // A prefix with no maker and no create route (no sources yet) is skipped in favour of the others.
    const id = await ensureFixture(ctx, prefix);
    if (id) return id;
  }
  const glob = prefixes.find((prefix) => acceptsGlob(p, prefix));
  return glob ? `${glob}_*` : undefined;
}

/** A valid sample of a non-ID parameter, from its schema. */
export function sampleValue(p: Param): unknown {
  if (p.name in sampleOverrides) return sampleOverrides[p.name];
  return sampleOf(p.name, p.schema);
}

function sampleOf(name: string, s: Schema): unknown {
  if (s.const !== undefined) return s.const;
  if (s.enum) return s.enum[0];
  if (s.default !== undefined) return s.default;
  const branches = s.anyOf ?? s.oneOf;
  if (branches) return sampleOf(name, branches.find((b) => b.type !== "null") ?? branches[0]!);
  const type = Array.isArray(s.type) ? s.type[0] : s.type;
  switch (type) {
    case "integer":
    case "number":
      return s.minimum ?? 1;
    case "boolean":
      return true;
    case "object":
      return {};
    case "array":
      return [];
    case "null":
      return null;
    default: {
      if (s.format === "email") return `${unique("walker")}@example.com`;
      if (s.format === "uri" || s.format === "url") return "https://example.com/";
      const value = /name$/.test(name) ? unique("walker") : "walker";
      if (s.pattern && !new RegExp(s.pattern).test(value)) {
        throw new Error(
          `No sample value for ${name} (pattern ${s.pattern}); add one to sampleOverrides in test/http/openapi-walk.ts`,
        );
      }
      return value;
    }
  }
}

/**
 * Values for every required parameter (and every ID parameter in `alsoIds`) from the user's own
 * resources; undefined when a required ID cannot be filled.
 */
export async function ownValues(
  ctx: MakerContext,
  op: Operation,
  alsoIds: string[] = [],
): Promise<Record<string, unknown> | undefined> {
  const values: Record<string, unknown> = {};
  for (const p of op.params) {
    if (!p.required && !alsoIds.includes(p.name) && !(p.name in sampleOverrides)) continue;
    if (idPrefixes(op, p)) {
      const id = await ownId(ctx, op, p);
      if (id === undefined) {
        if (p.required) return undefined;
        continue;
      }
      values[p.name] = id;
    } else values[p.name] = sampleValue(p);
  }
  return values;
}

/** Turns parameter values into a request: path, query string and JSON body. */
export function toRequest(
  op: Operation,
  values: Record<string, unknown>,
  extra: { query?: Record<string, string>; body?: Record<string, unknown> } = {},
): { path: string } & RequestOptions {
  let path = op.path;
  const query = new URLSearchParams();
  const body: Record<string, unknown> = {};
  for (const p of op.params) {
    if (!(p.name in values)) continue;
    const v = values[p.name];
    if (p.in === "path") path = path.replace(`{${p.name}}`, encodeURIComponent(String(v)));
    else if (p.in === "query") query.set(p.name, String(v));
    else body[p.name] = v;
  }
  for (const [k, v] of Object.entries(extra.query ?? {})) query.set(k, v);
  Object.assign(body, extra.body ?? {});
  const qs = query.toString();
  return {
    path: qs ? `${path}?${qs}` : path,
    ...(op.hasBody ? { body } : {}),
  };
}

/** `server.api`, kept under the name the walks use (streams are answered empty, not read to the end). */
export function call(
  server: TestServer,
  method: string,
  path: string,
  options: RequestOptions = {},
): Promise<ApiResponse> {
  return apiClient(server.url)(method, path, options);
}

/** Sends a request built by `toRequest`. */
export function send(
  server: TestServer,
  op: Operation,
  key: string | null,
  request: { path: string } & RequestOptions,
): Promise<ApiResponse> {
  const { path, ...options } = request;
  return call(server, op.method, path, { ...options, key });
}

/** Creates every fixture the operations need, so that later reads do not create any. */
export async function ensureAll(ctx: MakerContext, ops: Operation[]): Promise<void> {
  for (const op of ops) await ownValues(ctx, op, ["org_id"]);
  await ensureFixture(ctx, "o");
}

export function makerContext(server: TestServer, ops: Operation[], user: WalkUser): MakerContext {
  return { server, ops, user, own: new Map() };
}

// ---------------------------------------------------------------------------------------------------
// Snapshots and error assertions

/**
 * Everything the user can read: every GET operation (admin ones with the admin key) filled with the
 * user's fixtures, the largest page, with and without `org_id`.
 */
/**
 * Every GET answer about `ctx`'s data. `tenantOnly`: the admin lists of the whole instance (users,
 * organizations) keep only `ctx`'s own entries, since other tenants' doings change the rest.
 */
export async function snapshot(
  ctx: MakerContext,
  ops: Operation[],
  adminKey: string,
  options: { tenantOnly?: boolean } = {},
): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  for (const op of ops) {
    if (op.method !== "GET" || op.public || op.streaming) continue;
    const values = await ownValues(ctx, op);
    if (!values) continue;
    const key = op.admin ? adminKey : ctx.user.key;
    const extra = op.paginated ? { query: { limit: "100" } } : {};
    const variants: Array<Record<string, unknown>> = [values];
    const org = op.params.find((p) => p.name === "org_id" && !p.required && p.in !== "path");
    if (org) variants.push({ ...values, org_id: await ensureFixture(ctx, "o") });
    for (const v of variants) {
      const req = toRequest(op, v, extra);
      const res = await send(ctx.server, op, key, req);
      const body = withoutHeartbeats(req.path, res.body);
      out[`${op.method} ${req.path}`] = {
        status: res.status,
        body: options.tenantOnly ? ownEntries(req.path, body, ctx.user.id) : body,
      };
    }
  }
  return out;
}

/** Of the instance's user and organization lists, the entries of `userId`: itself and the organizations it owns. */
function ownEntries(target: string, body: any, userId: string): unknown {
  if (!Array.isArray(body?.data)) return body;
  const path = target.split("?")[0];
  if (path === "/v1/admin/users") return { data: body.data.filter((u: { id: string }) => u.id === userId) };
  if (path === "/v1/admin/orgs")
    return { data: body.data.filter((o: { owner_id: string }) => o.owner_id === userId) };
  return body;
}

/** The node list without its heartbeat times, which move by themselves, not with the stored data. */
function withoutHeartbeats(path: string, body: any): unknown {
  if (path !== "/v1/admin/nodes" || !Array.isArray(body?.data)) return body;
  return {
    data: body.data.map(({ heartbeat_at, heartbeat_age_ms, ...node }: Record<string, unknown>) => node),
  };
}

/** Asserts an error answer of the catalogue: JSON `{error, code}` whose code has this status. */
export function assertApiError(
  res: ApiResponse,
  expected: { status?: number; code?: string; range?: "4xx" },
  what = "",
): void {
  const where = `${what} → ${res.status} ${res.text.slice(0, 300)}`;
  if (expected.status !== undefined) assert.equal(res.status, expected.status, where);
  if (expected.range === "4xx") assert.ok(res.status >= 400 && res.status < 500, `expected 4xx: ${where}`);
  assert.match(res.headers.get("content-type") ?? "", /^application\/json/, `JSON content type: ${where}`);
  assert.equal(typeof res.body?.error, "string", `error message: ${where}`);
  assert.equal(typeof res.body?.code, "string", `error code: ${where}`);
  const entry = (errorCatalogue as Record<string, { status: number }>)[res.body.code];
  assert.ok(entry, `code ${res.body.code} is in the catalogue: ${where}`);
  assert.equal(res.status, entry.status, `status matches the catalogue: ${where}`);
  if (expected.code !== undefined) assert.equal(res.body.code, expected.code, where);
}
