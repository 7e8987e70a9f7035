import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(() => server.close());

test("the bootstrap key authenticates as the admin user", async () => {
  const res = await server.api("GET", "/v1/users/me");
  assert.equal(res.status, 200);
  assert.equal(res.body.data.username, "admin");
  assert.match(res.body.data.id, /^u_/);
  assert.deepEqual(res.body.data.orgs, []);
});

test("a request without a key gets a 401 JSON error", async () => {
  const res = await server.api("GET", "/v1/users/me", { key: null });
  assert.equal(res.status, 401);
  assert.equal(res.body.code, "unauthorized");
  assert.equal(typeof res.body.error, "string");
});

test("an unknown key gets 401", async () => {
  const res = await server.api("GET", "/v1/users/me", { key: "fnt_nope" });
  assert.equal(res.status, 401);
});

test("health and readiness answer without a key", async () => {
  assert.equal((await server.api("GET", "/healthz", { key: null })).body.status, "ok");
  assert.equal((await server.api("GET", "/readyz", { key: null })).body.status, "ready");
});

test("a start that makes the first admin after listening is live but not ready until the admin exists", async () => {
  const deferred = await startServer({}, {}, { deferBootstrap: true });
  try {
    assert.equal((await deferred.api("GET", "/healthz", { key: null })).status, 200);
    const starting = await deferred.api("GET", "/readyz", { key: null });
    assert.deepEqual([starting.status, starting.body.status], [503, "starting: creating the first admin"]);
    assert.equal(
      (await deferred.api("GET", "/v1/users/me")).status,
      401,
      "the bootstrap key opens nothing yet",
    );
    await deferred.built.services.accounts.bootstrap(deferred.built.services.config.bootstrapApiKey);
    assert.equal((await deferred.api("GET", "/readyz", { key: null })).body.status, "ready");
    assert.equal((await deferred.api("GET", "/v1/users/me")).status, 200);
  } finally {
    await deferred.close();
  }
});

test("an unknown path is a 404 and a known path with another method a 405", async () => {
  const missing = await server.api("GET", "/v1/nothing-here");
  assert.equal(missing.status, 404);
  assert.equal(missing.body.code, "not_found");
  const wrongMethod = await server.api("PATCH", "/v1/users/me");
  assert.equal(wrongMethod.status, 405);
  assert.equal(wrongMethod.body.code, "method_not_allowed");
});
