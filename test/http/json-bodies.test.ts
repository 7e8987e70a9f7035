/**
 * API request bodies lose their `__proto__` keys at every depth, whether spelt out or behind `\u`
 * escapes, and keep everything else (app/json-bodies.ts parses without a reviver when no such key can
 * be in the text).
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { deploy } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
let sourceId: string;
before(async () => {
  server = await startServer();
  const source = await deploy(server, {
    component_code: `export default {
      name: "json-bodies-echo",
      version: "0.0.1",
      run(event) { this.$emit({ event, keys: Object.keys(event), proto: Object.getPrototypeOf(event) === Object.prototype }); },
    };`,
  });
  sourceId = source.id;
});
after(() => server.close());

/** What run saw of the `event` of a manual run whose body is `raw`. */
async function seen(raw: string): Promise<{ event: unknown; keys: string[]; proto: boolean }> {
  const res = await server.api("POST", `/v1/sources/${sourceId}/run`, { raw });
  assert.equal(res.status, 200, res.text);
  return res.body.data.emits[0].event;
}

test("__proto__ keys are dropped at every depth, spelt out or escaped; other keys are kept", async () => {
  const plain = await seen('{"event":{"a":1,"b":{"c":[1,"x\\u00e9"]}}}');
  assert.deepEqual(plain.event, { a: 1, b: { c: [1, "xé"] } });
  for (const key of ["__proto__", "\\u005f_proto__", "__pr\\u006fto__"]) {
    const got = await seen(`{"event":{"a":1,"${key}":{"polluted":true},"b":{"${key}":{"x":1},"c":2}}}`);
    assert.deepEqual(got.event, { a: 1, b: { c: 2 } }, key);
    assert.deepEqual(got.keys, ["a", "b"], key);
    assert.equal(got.proto, true, key);
  }
});
