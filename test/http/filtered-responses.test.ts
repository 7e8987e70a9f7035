/**
 * `include`/`exclude` on every route that takes them, with field lists that keep nothing, keep one field
 * or drop the ID: never a 500 (a response schema with required fields made the serializer throw). Routes
 * that do not take them (the console's, left out of the OpenAPI document) ignore them, and no route
 * answers odd query parameters (repeated, unknown, not names at all) with a 5xx.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { adminKey, startServer, type TestServer } from "../helpers.ts";
import {
  call,
  ensureAll,
  hiddenOperations,
  makerContext,
  operations,
  ownValues,
  send,
  toRequest,
  unique,
} from "./openapi-walk.ts";

let server: TestServer;
before(async () => {
  server = await startServer({}, {}, { publishRegistry: true });
});
after(() => server.close());

/** Query strings no route documents this way. */
const oddQueries = [
  "include=nothing",
  "include=name",
  "exclude=id",
  "include=0",
  "exclude=data",
  "include=signed_out&include=id",
  "include=id&exclude=id",
  "unknown_xyz=1",
  "limit=1&limit=2",
  "a[b]=1",
  "=&&%ZZ",
];

test("include and exclude never make a route fail, whatever fields they name", async () => {
  const ops = await operations(server);
  const owner = makerContext(server, ops, await server.createUser(unique("filter")));
  await ensureAll(owner, ops);
  let checked = 0;
  for (const op of ops) {
    if (op.streaming || op.method === "DELETE") continue;
    if (!op.params.some((p) => p.name === "include")) continue;
    const values = await ownValues(owner, op);
    if (!values) continue;
    const filters: Array<Record<string, string>> = [
      { include: "nothing" },
      { include: "name" },
      { exclude: "id" },
      { include: "0" },
    ];
    for (const query of filters) {
      const req = toRequest(op, values, op.hasBody ? { body: query } : { query });
      const res = await send(server, op, op.admin ? adminKey : owner.user.key, req);
      assert.ok(
        res.status < 500,
        `${op.label} ${JSON.stringify(query)} → ${res.status} ${res.text.slice(0, 200)}`,
      );
      checked++;
    }
  }
  assert.ok(checked > 40, `routes with include were found (${checked} requests)`);
});

test("odd query parameters on any route, the console's included, never get a 5xx", async () => {
  const ops = await operations(server);
  const owner = makerContext(server, ops, await server.createUser(unique("odd-query")));
  await ensureAll(owner, ops);
  const failures: string[] = [];
  const ask = async (method: string, path: string, key: string | null, body?: unknown) => {
    for (const query of oddQueries) {
      const url = `${path}${path.includes("?") ? "&" : "?"}${query}`;
      // The console's routes want their own header; the API's ignore it. Redirects are not followed:
      // swagger-ui's /docs/static/index.html redirects to itself when it has a query.
      const headers: Record<string, string> = { "x-fount-console": "1" };
      if (key !== null) headers.authorization = `Bearer ${key}`;
      if (body !== undefined) headers["content-type"] = "application/json";
      const res = await fetch(server.url + url, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        redirect: "manual",
      });
      const text = await res.text();
      if (res.status >= 500) failures.push(`${method} ${url} → ${res.status} ${text.slice(0, 160)}`);
    }
  };
  for (const op of ops) {
    // Deleting the fixtures would leave later routes nothing to read.
    if (op.streaming || op.method === "DELETE") continue;
    const values = await ownValues(owner, op);
    if (!values) continue;
    const req = toRequest(op, values);
    await ask(op.method, req.path, op.admin ? adminKey : owner.user.key, req.body);
  }
  const hidden = hiddenOperations(server, ops);
  for (const op of hidden) {
    const path = op.path.replace(/\{\w+\}/g, "x");
    for (const key of [owner.user.key, null]) await ask(op.method, path, key, op.hasBody ? {} : undefined);
  }
  assert.deepEqual(failures, []);
  // Signing out asks for nothing: include/exclude are not its parameters, so its answer stays whole.
  const signedOut = await call(server, "DELETE", "/console/session?include=a", {
    key: null,
    headers: { "x-fount-console": "1" },
  });
  assert.equal(signedOut.status, 200, signedOut.text);
  assert.deepEqual(signedOut.body, { data: { signed_out: false } });
});
