/**
 * A source whose `run` throws answers its anonymous HTTP caller with a generic 500 that names the
 * request, never the thrown message or code (they may carry secrets or internal host names); the
 * message is on the source's `$errors`.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { deploy, events, hit } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(() => server.close());

const leakyCode = `export default {
  name: "Leaky",
  version: "0.1.0",
  props: { http: "$.interface.http" },
  async run(event) {
    const err = new Error("connect to db.internal.example:5432 with password hunter2 failed");
    err.code = "DB_PASSWORD_hunter2";
    throw err;
  },
};
`;

test("a throwing run answers a generic 500 with the request ID; the message goes to $errors only", async () => {
  const s = await deploy(server, { component_code: leakyCode });
  const res = await hit(s.endpoint_url, {
    method: "POST",
    headers: { "content-type": "application/json", "x-request-id": "req-leak-1" },
    body: "{}",
  });
  assert.equal(res.status, 500);
  assert.equal(res.headers.get("x-request-id"), "req-leak-1");
  assert.deepEqual(res.body, {
    error: "The component threw an error",
    code: "component_error",
    details: { request_id: "req-leak-1" },
  });
  assert.equal(res.text.includes("hunter2"), false);
  assert.equal(res.text.includes("db.internal"), false);

  const [entry] = await events(server, s.id, "$errors");
  assert.match(entry.event.error.message, /db\.internal\.example:5432 with password hunter2/);
  assert.equal(entry.event.error.code, "DB_PASSWORD_hunter2");
});

test("without a request ID from the caller, the answer names the generated one", async () => {
  const s = await deploy(server, { component_code: leakyCode });
  const res = await hit(s.endpoint_url, { method: "GET" });
  assert.equal(res.status, 500);
  const id = res.headers.get("x-request-id");
  assert.ok(id);
  assert.equal(res.body.details.request_id, id);
});
