/**
 * Malformed input, route by route from the app's own OpenAPI document: bad JSON, non-object bodies,
 * wrong types, huge strings, strings holding U+0000, unknown fields, bad IDs, bad page sizes and cursors
 * all get a 4xx JSON error of the catalogue, and nothing the caller (or the admin) can read has changed
 * afterwards. It runs on PostgreSQL too (test/http-postgres/malformed.test.ts).
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { adminKey, type RequestOptions, startServer, type TestServer } from "../helpers.ts";
import {
  admitsType,
  assertApiError,
  call,
  declaredTypes,
  ensureAll,
  makerContext,
  type Operation,
  operations,
  ownValues,
  snapshot,
  toRequest,
  unique,
} from "./openapi-walk.ts";

let server: TestServer;
before(async () => {
  server = await startServer({}, {}, { publishRegistry: true });
});
after(() => server.close());

/** A string far over any field's limit but under the body limit, so that the schema must refuse it. */
const hugeBodyString = "x".repeat(100 * 1024);
// Node refuses request heads over 16 KB before Fastify sees them (see conventions.test.ts), so query
// strings get the largest value that still reaches the schema.
const hugeQueryString = "x".repeat(8 * 1024);

/** One value of each JSON type; the ones a schema does not admit are its wrong types. */
const typeSamples: Array<[string, unknown]> = [
  ["integer", 12345],
  ["number", 1.5],
  ["boolean", true],
  ["string", "text"],
  ["object", {}],
  ["array", ["text"]],
  ["null", null],
];

interface Variant {
  what: string;
  path: string;
  options: RequestOptions;
}

function variants(op: Operation, values: Record<string, unknown>): Variant[] {
  const base = toRequest(op, values);
  const baseBody = (base.body ?? {}) as Record<string, unknown>;
  const out: Variant[] = [];
  const withBody = (what: string, body: Record<string, unknown>) =>
    out.push({ what, path: base.path, options: { body } });
  const withQuery = (what: string, query: Record<string, string>) => {
    const req = toRequest(op, values, { query });
    out.push({ what, path: req.path, options: op.hasBody ? { body: baseBody } : {} });
  };

  // A route without a body ignores one, but not one that is not JSON at all.
  const raws = op.hasBody
    ? ['{"url": ', "{'a': 1}", "[]", "null", '"text"', "42", "true", "[{}]"]
    : ['{"url": '];
  if (op.method !== "GET") {
    for (const raw of raws) out.push({ what: `body ${raw}`, path: base.path, options: { raw } });
  }
  if (op.hasBody) {
    withBody("unknown field", { ...baseBody, unknown_field_xyz: "x" });
    if (op.params.some((p) => p.in === "body" && p.required)) withBody("empty body", {});
    for (const p of op.params.filter((x) => x.in === "body")) {
      if (declaredTypes(p.schema).length === 0) continue; // accepts any JSON value
      for (const [type, wrong] of typeSamples) {
        if (!admitsType(p.schema, type)) withBody(`${p.name}: ${type}`, { ...baseBody, [p.name]: wrong });
      }
      if (admitsType(p.schema, "string")) {
        withBody(`${p.name}: 100 KB`, { ...baseBody, [p.name]: hugeBodyString });
        // PostgreSQL's text cannot hold U+0000: refused on both drivers, never a 500 on one of them.
        withBody(`${p.name}: NUL`, { ...baseBody, [p.name]: `${String(baseBody[p.name] ?? "a")}\u0000` });
      }
      if (admitsType(p.schema, "object"))
        withBody(`${p.name}: NUL in a value`, { ...baseBody, [p.name]: { a: "\u0000" } });
    }
    // Unknown query parameters are ignored (clients written for Pipedream send `limit` and `after`
    // everywhere): test/http/lenient-requests.test.ts.
  }
  for (const p of op.params.filter((x) => x.in === "query")) {
    if (admitsType(p.schema, "string")) withQuery(`${p.name}: 8 KB`, { [p.name]: hugeQueryString });
    if (admitsType(p.schema, "string")) withQuery(`${p.name}: NUL`, { [p.name]: "a\u0000" });
    if (!admitsType(p.schema, "string") && admitsType(p.schema, "integer")) {
      for (const bad of ["x", "1.5", "", "1e400"]) withQuery(`${p.name}=${bad}`, { [p.name]: bad });
      if (p.schema.minimum !== undefined)
        withQuery(`${p.name} under minimum`, { [p.name]: String(p.schema.minimum - 1) });
      if (p.schema.maximum !== undefined)
        withQuery(`${p.name} over maximum`, { [p.name]: String(p.schema.maximum + 1) });
    }
    if (!admitsType(p.schema, "string") && admitsType(p.schema, "boolean"))
      withQuery(`${p.name}=maybe`, { [p.name]: "maybe" });
  }
  if (!op.hasBody) {
    if (op.params.some((p) => p.in === "query" && p.name === "include")) {
      const once = toRequest(op, values, { query: { include: "id" } }).path;
      out.push({ what: "include twice", path: `${once}&include=id`, options: {} });
    }
  }
  if (op.paginated) {
    for (const limit of ["0", "101", "-1", "x", "1000000000000"]) withQuery(`limit=${limit}`, { limit });
    const notCursors = [
      "garbage",
      "!!!",
      Buffer.from("s-1").toString("base64url"),
      Buffer.from("x12").toString("base64url"),
      "",
      "czE==",
    ];
    for (const cursor of notCursors) {
      withQuery(`after=${cursor}`, { after: cursor });
      withQuery(`before=${cursor}`, { before: cursor });
    }
  }
  for (const p of op.params.filter((x) => x.in === "path")) {
    const req = toRequest(op, { ...values, [p.name]: "__BAD__" });
    for (const bad of ["bad!id", "%00", "x".repeat(150), "o_", "wh_*"]) {
      out.push({
        what: `${p.name}=${bad.slice(0, 12)}`,
        path: req.path.replace("__BAD__", bad.startsWith("%") ? bad : encodeURIComponent(bad)),
        options: op.hasBody ? { body: baseBody } : {},
      });
    }
  }
  return out;
}

// Some thousand requests, each route's followed by a snapshot of what the owner can read: minutes on a
// loaded 2-core machine, past the suite's 120 s default bound, which is for one behaviour, not a sweep.
const sweepTimeoutMs = 900_000;

test("malformed input to every route gets a 4xx JSON error and changes nothing", {
  timeout: sweepTimeoutMs,
}, async (t) => {
  const ops = await operations(server);
  const owner = makerContext(server, ops, await server.createUser(unique("owner")));
  await ensureAll(owner, ops);
  // What the owner and the admin can read; each route's malformed requests must leave it as it was. A
  // route that wrongly changes it fails alone: the next one compares with the state it left. The state
  // is read again after each route that writes and after the last route; a GET route's requests are
  // compared with it together with the GET routes just before it, whose names the failure gives
  // (reading the whole state after every route took most of the sweep: 21 to 26 s per driver, against
  // 8 to 9 s now).
  let expected = await snapshot(owner, ops, adminKey);
  const checked = ops.filter((op) => !op.public); // health probes take no input
  let unread: string[] = [];

  for (const op of checked) {
    await t.test(op.label, async () => {
      const values = await ownValues(owner, op);
      assert.ok(values, `${op.label}: valid values`);
      const key = op.admin ? adminKey : owner.user.key;
      const answers = [];
      for (const v of variants(op, values)) {
        answers.push({ v, res: await call(server, op.method, v.path, { ...v.options, key }) });
      }
      unread.push(op.label);
      if (op.method !== "GET" || op === checked.at(-1)) {
        const before = expected;
        const by = unread.join(", ");
        unread = [];
        expected = await snapshot(owner, ops, adminKey);
        assert.deepEqual(expected, before, `nothing changed (by ${by})`);
      }
      for (const { v, res } of answers) {
        assertApiError(res, { range: "4xx" }, `${op.method} ${v.path.slice(0, 120)} [${v.what}]`);
      }
    });
  }
});

test("a path that is not a valid URL component, or a parameter over the router's limit, gets a catalogue error", async () => {
  const ops = await operations(server);
  const owner = makerContext(server, ops, await server.createUser(unique("paths")));
  for (const op of ops.filter((o) => o.params.some((p) => p.in === "path"))) {
    const values = await ownValues(owner, op);
    assert.ok(values);
    const p = op.params.find((x) => x.in === "path")!;
    const req = toRequest(op, { ...values, [p.name]: "__BAD__" });
    for (const bad of ["%ZZ", "x".repeat(300)]) {
      const path = req.path.replace("__BAD__", bad);
      const res = await call(server, op.method, path, {
        key: op.admin ? adminKey : owner.user.key,
        body: req.body,
      });
      assertApiError(res, { range: "4xx" }, `${op.method} ${path.slice(0, 100)}`);
    }
  }
});

test("a JSON body with the wrong type is refused, not converted", async () => {
  const { key } = await server.createUser(unique("typed"));
  for (const body of [
    { url: "https://example.com/", name: 123 },
    { url: "https://example.com/", name: ["a"] },
    { url: "https://example.com/", description: true },
    { url: ["https://example.com/"] },
  ]) {
    const res = await server.api("POST", "/v1/webhooks", { key, body });
    assertApiError(res, { status: 400, code: "invalid_parameter" }, JSON.stringify(body));
  }
  const created = await server.api("POST", "/v1/webhooks", { key, body: { url: "https://example.com/" } });
  const res = await server.api("PUT", `/v1/webhooks/${created.body.data.id}`, {
    key,
    body: { active: "false" },
  });
  assertApiError(res, { status: 400, code: "invalid_parameter" });
  assert.equal(res.body.details.field, "active");
  // From the query string, text is converted: that is the only way to say false there.
  const fromQuery = await server.api("PUT", `/v1/webhooks/${created.body.data.id}?active=false`, { key });
  assert.equal(fromQuery.status, 200);
  assert.equal(fromQuery.body.data.active, false);
});
