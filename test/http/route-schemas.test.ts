/**
 * Route schemas are compiled at each route's first use (http/schema-compilers.ts); every one of them
 * must still compile, as Fastify would have checked at start, and a route answers alike before and after.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(() => server.close());

test("a started server has compiled few of its route schemas; every one of them compiles", async () => {
  const schemas = server.built.app.routeSchemas;
  const compiled = schemas.compileAll();
  // The API has well over a hundred routes with schemas; the start and its first requests used few.
  assert.ok(compiled > 150, `only ${compiled} schemas were left to compile`);
  assert.equal(schemas.compileAll(), 0);
});

test("validators and serializers compiled at first use answer as eagerly compiled ones did", async () => {
  // A fresh server: nothing of these routes compiled yet.
  const fresh = await startServer();
  try {
    const bad = await fresh.api("POST", "/v1/sources", { body: { component_code: 42 } });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.code, "invalid_parameter");
    assert.match(JSON.stringify(bad.body), /component_code/, JSON.stringify(bad.body));
    // A query coerced by its validator, an answer written by its serializer.
    const me = await fresh.api("GET", "/v1/users/me?limit=5");
    assert.equal(me.status, 200);
    assert.equal(typeof me.body.data.id, "string");
    // The same requests once everything is compiled answer the same.
    assert.ok(fresh.built.app.routeSchemas.compileAll() > 0);
    const again = await fresh.api("POST", "/v1/sources", { body: { component_code: 42 } });
    assert.deepEqual({ status: again.status, body: again.body }, { status: bad.status, body: bad.body });
    const meAgain = await fresh.api("GET", "/v1/users/me?limit=5");
    assert.deepEqual({ status: meAgain.status, body: meAgain.body }, { status: me.status, body: me.body });
  } finally {
    await fresh.close();
  }
});
