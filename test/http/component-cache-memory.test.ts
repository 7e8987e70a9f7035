/**
 * What the server keeps in memory of large saved components (docs/operations.md, "Memory the caches of
 * components and sources take"): the component records' cache is bounded by bytes, so saving many leaves
 * the heap about where it was, and a component let go is read from the store again when next used. The
 * cache is the domain's, above either driver, so this runs on SQLite only (the sources' row caches, one
 * per driver, are test/http/cache-memory.test.ts, on both).
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { hit } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";
import { heapMib } from "./heap.ts";

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(() => server.close());

/** A component whose code is about 1 MB, unique to `i`, that emits when run. */
function bigComponent(i: number): string {
  const pad = JSON.stringify("x".repeat(1000 * 1000));
  return `export default { name: "big${i}", version: "0.0.1", props: { http: "$.interface.http" }, async run() { this.$emit({ n: ${i}, pad: ${pad}.length }); } };`;
}

test("saving many large components keeps a bounded amount of them in memory, and each still runs", async (t) => {
  const user = await server.createUser("component-cache");
  const save = async (i: number) => {
    const res = await server.api("POST", "/v1/components", {
      key: user.key,
      body: { component_code: bigComponent(i) },
    });
    assert.equal(res.status, 200, res.text);
    return res.body.data.id as string;
  };
  const first = await save(0);
  const before = heapMib();
  // 2.5 times the caches' bound (32 MiB, components.ts): kept for ever, about 1 MiB a save stayed.
  const count = 80;
  for (let i = 1; i <= count; i++) await save(i);
  const grown = heapMib() - before;
  t.diagnostic(`the heap grew ${grown.toFixed(0)} MiB`);
  assert.ok(grown < 52, `the heap grew ${grown.toFixed(0)} MiB`);
  // The first component was let go long ago: it is read from the store and built again.
  const res = await server.api("POST", "/v1/sources", { key: user.key, body: { component_id: first } });
  assert.equal(res.status, 200, res.text);
  const answer = await hit(res.body.data.endpoint_url, { method: "POST", body: "{}" });
  assert.equal(answer.status, 200);
});
