import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { FastifyInstance } from "fastify";
import { startServer, type TestServer } from "../helpers.ts";
import { operations } from "./openapi-walk.ts";

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(() => server.close());

/** Registered routes that are not part of the documented API, and why. */
const undocumented: Array<[RegExp, string]> = [
  [/^\/docs/, "the docs UI itself"],
  [/^\/openapi\.json$/, "the document itself"],
  [/^\/e\//, "source HTTP endpoints take any method, path and body; they belong to the component"],
  [/^\/$|^\/console\//, "the web console's page, files and cookie sessions (docs/console.md), not the API"],
  [/^\/metrics$/, "Prometheus text for scrapers (docs/operations.md), not the API"],
];

/** Every route the app registered, as OpenAPI paths (`{param}`) with their methods, from `printRoutes`. */
function registeredRoutes(app: FastifyInstance): Map<string, Set<string>> {
  const routes = new Map<string, Set<string>>();
  const stack: string[] = [];
  for (const line of app.printRoutes({ commonPrefix: false }).split("\n")) {
    const m = /^((?:│ {3}| {4})*)(?:├── |└── )(.*?)(?: \(([A-Z, ]+)\))?$/.exec(line);
    if (!m) continue;
    stack.length = m[1]!.length / 4;
    stack.push(m[2]!);
    if (!m[3]) continue;
    const path = stack.join("").replace(/:([A-Za-z0-9_]+)/g, "{$1}");
    const methods = routes.get(path) ?? new Set<string>();
    for (const method of m[3].split(", ")) if (method !== "HEAD") methods.add(method);
    routes.set(path, methods);
  }
  return routes;
}

test("every registered route appears in /openapi.json with all its methods", async (t) => {
  const routes = registeredRoutes(server.built.app);
  assert.ok(routes.has("/v1/webhooks/{id}"), "the route tree was read");
  const documented = new Map<string, Set<string>>();
  for (const op of await operations(server)) {
    const methods = documented.get(op.path) ?? new Set<string>();
    methods.add(op.method);
    documented.set(op.path, methods);
  }
  for (const [path, methods] of routes) {
    if (undocumented.some(([pattern]) => pattern.test(path))) continue;
    await t.test(path, () => {
      assert.ok(documented.has(path), `${path} is registered but not documented`);
      assert.deepEqual([...documented.get(path)!].sort(), [...methods].sort(), `methods of ${path}`);
    });
  }
  await t.test("nothing is documented that is not registered", () => {
    for (const [path, methods] of documented) {
      assert.deepEqual([...(routes.get(path) ?? [])].sort(), [...methods].sort(), `${path} is registered`);
    }
  });
});

test("the document is OpenAPI 3.1 with bearer security on every route but the public probes", async () => {
  const doc = (await server.api("GET", "/openapi.json", { key: null })).body;
  assert.equal(doc.openapi, "3.1.0");
  assert.deepEqual(doc.components.securitySchemes.bearer, { type: "http", scheme: "bearer" });
  assert.deepEqual(doc.security, [{ bearer: [] }]);
  for (const op of await operations(server)) {
    const isProbe = op.path === "/healthz" || op.path === "/readyz";
    assert.equal(op.public, isProbe, `${op.label} ${isProbe ? "is" : "is not"} public`);
    for (const name of op.path.match(/\{([^}]+)\}/g) ?? []) {
      const param = name.slice(1, -1);
      assert.ok(
        op.params.some((p) => p.in === "path" && p.name === param && p.required),
        `${op.label} documents its path parameter ${param}`,
      );
    }
  }
});

test("every authenticated operation documents a success and the 400 and 401 error bodies", async () => {
  const doc = (await server.api("GET", "/openapi.json", { key: null })).body;
  for (const op of await operations(server)) {
    if (op.public) continue;
    const responses = doc.paths[op.path][op.method.toLowerCase()].responses as Record<string, any>;
    assert.ok(
      Object.keys(responses).some((s) => s.startsWith("2")),
      `${op.label} documents a success`,
    );
    for (const status of ["400", "401"]) {
      const schema = responses[status]?.content?.["application/json"]?.schema;
      assert.deepEqual(schema?.required, ["error", "code"], `${op.label} documents ${status}`);
    }
  }
});

test("every operation has an operationId: unique, camelCase, and stable for known routes", async () => {
  const doc = (await server.api("GET", "/openapi.json", { key: null })).body;
  const owners = new Map<string, string>();
  for (const op of await operations(server)) {
    const id = doc.paths[op.path][op.method.toLowerCase()].operationId;
    assert.match(id ?? "", /^[a-z][A-Za-z0-9]*$/, `${op.label} has a camelCase operationId`);
    assert.equal(owners.get(id), undefined, `${op.label} and ${owners.get(id)} share ${id}`);
    owners.set(id, op.label);
  }
  // Client generators name methods after these: renaming one breaks their users.
  const ids = (path: string, method: string) => doc.paths[path][method].operationId;
  assert.equal(ids("/v1/sources/{id}/events", "get"), "listSourceEvents");
  assert.equal(ids("/v1/sources", "post"), "createSource");
  assert.equal(ids("/v1/users/me/sources", "get"), "listMySources");
  assert.equal(ids("/v1/webhooks/{id}", "put"), "updateWebhook");
  assert.equal(ids("/v1/sources/{id}/run", "post"), "runSource");
  assert.equal(ids("/v1/sources/{id}/events/export", "get"), "exportSourceEvents");
  assert.equal(ids("/v1/users/me/event_summaries", "get"), "listMyEventSummaries");
  assert.equal(ids("/v1/orgs/{org_id}/event_summaries", "get"), "listOrgEventSummaries");
});

test("/docs is the reference page: every operation by its operationId, no script, a strict policy", async () => {
  const doc = (await server.api("GET", "/openapi.json", { key: null })).body;
  const res = await fetch(`${server.url}/docs`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type") ?? "", /^text\/html/);
  const policy = res.headers.get("content-security-policy") ?? "";
  assert.match(policy, /default-src 'none'/);
  assert.doesNotMatch(policy, /script-src|unsafe-inline|https?:/);
  const html = await res.text();
  assert.doesNotMatch(html, /<script/i);
  for (const op of await operations(server)) {
    const id = doc.paths[op.path][op.method.toLowerCase()].operationId;
    assert.ok(html.includes(`<section class="op" id="${id}"`), `${op.label} is on the page as #${id}`);
    assert.ok(html.includes(`href="#${id}"`), `${op.label} is in the page's index`);
  }
  // Its one stylesheet has its hash in its name: cached for good. The page itself is revalidated.
  const css = /<link rel="stylesheet" href="(\/docs\/reference-[0-9a-f]+\.css)">/.exec(html)?.[1];
  assert.ok(css, "the page links its stylesheet");
  const sheet = await fetch(server.url + css);
  assert.equal(sheet.status, 200);
  assert.match(sheet.headers.get("content-type") ?? "", /^text\/css/);
  assert.equal(sheet.headers.get("cache-control"), "public, max-age=31536000, immutable");
  assert.equal((await fetch(`${server.url}/docs/reference-000000000000.css`)).status, 404);
  assert.equal(res.headers.get("cache-control"), "no-cache");
  const etag = res.headers.get("etag") ?? "";
  const again = await fetch(`${server.url}/docs`, { headers: { "if-none-match": etag } });
  assert.equal(again.status, 304);
});
