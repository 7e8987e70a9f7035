/**
 * JSON nested thousands of levels deep: the API refuses it with a catalogue 400, a source endpoint runs
 * the source with the body as text and tells the owner on `$errors`, and a component that emits or
 * stores such a value gets a clear `$errors` entry. Never a 500.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { deploy, events, fixture, hit } from "../fixtures/components/fixtures.ts";
import { adminKey, startServer, type TestServer } from "../helpers.ts";
import { assertApiError, unique } from "./openapi-walk.ts";

let server: TestServer;
let owner: { id: string; key: string };
before(async () => {
  server = await startServer();
  owner = await server.createUser(unique("deep"));
});
after(() => server.close());

const deepObject = (levels: number) => `${'{"a":'.repeat(levels)}1${"}".repeat(levels)}`;
const deepArray = (levels: number) => `${"[".repeat(levels)}${"]".repeat(levels)}`;

test("a source endpoint runs with a 5,000-deep JSON body as text and notes it on $errors", async () => {
  const source = await deploy(server, { component_code: fixture("http-echo.mjs") }, owner.key);
  const endpoint: string = source.configured_props.http.endpoint_url;
  for (const body of [deepObject(5000), deepArray(5000)]) {
    const res = await hit(endpoint, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body,
    });
    assert.equal(res.status, 200, res.text);
  }
  const stored = await events(server, source.id, undefined, owner.key);
  assert.equal(stored.length, 2);
  for (const e of stored) {
    assert.equal(typeof e.event.event.body, "string", "the body reached run as text");
    assert.equal(e.event.event.body, e.event.event.bodyRaw);
  }
  const errors = await events(server, source.id, "$errors", owner.key);
  assert.equal(errors.length, 2);
  for (const e of errors) {
    assert.equal(e.event.error.code, "body_too_deep");
    assert.match(e.event.error.message, /deeper than 128 levels/);
  }
  // A body at the limit is parsed as usual, with nothing on $errors.
  const ok = await hit(endpoint, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: deepObject(127),
  });
  assert.equal(ok.status, 200);
  const latest = (await events(server, source.id, undefined, owner.key))[0];
  assert.equal(typeof latest.event.event.body, "object");
  assert.equal((await events(server, source.id, "$errors", owner.key)).length, 2);
});

test("API routes refuse a deeply nested JSON body with 400 json_too_deep", async () => {
  const source = await deploy(server, { component_code: fixture("http-echo.mjs") }, owner.key);
  const routes: Array<[string, string]> = [
    ["POST", "/v1/webhooks"],
    ["POST", "/v1/sources"],
    ["PUT", `/v1/sources/${source.id}`],
    ["POST", `/v1/sources/${source.id}/run`],
    ["POST", "/v1/components"],
  ];
  for (const [method, path] of routes) {
    for (const raw of [
      deepObject(5000),
      `{"event":${deepObject(200)}}`,
      `{"configured_props":${deepArray(5000)}}`,
    ]) {
      const res = await server.api(method, path, { key: owner.key, raw });
      assertApiError(res, { status: 400, code: "json_too_deep" }, `${method} ${path}`);
    }
  }
  // Brackets inside strings are text, not nesting.
  const run = await server.api("POST", `/v1/sources/${source.id}/run`, {
    key: owner.key,
    body: { event: { text: "[".repeat(5000) } },
  });
  assert.equal(run.status, 200, run.text);
});

const deepEmitter = `export default {
  name: "Deep emitter",
  version: "0.0.1",
  props: { db: "$.service.db" },
  async run(event) {
    let deep = 1;
    for (let i = 0; i < event.levels; i++) deep = { a: deep };
    if (event.store) this.db.set("deep", deep);
    this.$emit({ deep });
    this.$emit({ fine: true });
  },
};`;

test("a component that emits or stores a value nested too deep gets $errors, never a 500", async () => {
  const source = await deploy(server, { component_code: deepEmitter }, owner.key);
  const run = await server.api("POST", `/v1/sources/${source.id}/run`, {
    key: owner.key,
    body: { event: { levels: 2500 } },
  });
  assert.equal(run.status, 200, run.text);
  const emitted = await events(server, source.id, undefined, owner.key);
  assert.deepEqual(
    emitted.map((e) => e.event),
    [{ fine: true }],
    "the shallow emit was stored, the deep one not",
  );
  const errors = await events(server, source.id, "$errors", owner.key);
  assert.equal(errors[0]?.event.error.code, "emit_too_deep");

  const stored = await server.api("POST", `/v1/sources/${source.id}/run`, {
    key: owner.key,
    body: { event: { levels: 2500, store: true } },
  });
  assert.ok(stored.status < 500, stored.text);
  const after = await events(server, source.id, "$errors", owner.key);
  assert.match(after[0]?.event.error.message ?? "", /db\.set\("deep"\): the value nests deeper than 512/);
});

test("a body that is not JSON gets a 400 saying where it failed, never the text around it, a secret maybe", async () => {
  for (const body of ['{"api_key": fnt_Vr09al8secretsecret}', '{"token": "abc", ACMECREDTOKEN', "{\n  a"]) {
    const res = await fetch(`${server.url}/v1/webhooks`, {
      method: "POST",
      headers: { authorization: `Bearer ${adminKey}`, "content-type": "application/json" },
      body,
    });
    const answer = (await res.json()) as { code: string; error: string };
    assert.equal(res.status, 400, body);
    assert.equal(answer.code, "invalid_json");
    assert.match(answer.error, /^The request body is not valid JSON/);
    assert.doesNotMatch(answer.error, /fnt_|secret|ACME|"a/, answer.error);
  }
});
