/**
 * What the server keeps in memory of sources with large configured props (docs/operations.md, "Memory the
 * caches of components and sources take"): each driver's row caches are bounded by bytes, so hitting
 * many of them leaves the heap about where it was, and a source let go is read from the store again when
 * next used. Saved components: test/http/component-cache-memory.test.ts.
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

test("hitting many sources with large configured props keeps a bounded amount of their rows in memory", async (t) => {
  const user = await server.createUser("source-cache");
  const props = Array.from({ length: 15 }, (_, i) => `p${i}: { type: "string" }`).join(", ");
  const code = `export default { name: "fat", version: "0.0.1", props: { http: "$.interface.http", ${props} }, async run() {} };`;
  const component = await server.api("POST", "/v1/components", {
    key: user.key,
    body: { component_code: code },
  });
  assert.equal(component.status, 200, component.text);
  const deploy = async (i: number) => {
    // About 0.95 MiB of props a source.
    const configured_props: Record<string, string> = {};
    for (let k = 0; k < 15; k++) configured_props[`p${k}`] = `${i}-${k}-${"y".repeat(63 * 1024)}`;
    const res = await server.api("POST", "/v1/sources", {
      key: user.key,
      body: { component_id: component.body.data.id, configured_props },
    });
    assert.equal(res.status, 200, res.text);
    return res.body.data.endpoint_url as string;
  };
  const urls = [await deploy(0)];
  // Four times one source cache's bound (32 MiB, row-cache.ts; SQLite keeps rows by endpoint and by ID).
  const count = 128;
  for (let i = 1; i < count; i++) urls.push(await deploy(i));
  const before = heapMib();
  for (let i = 0; i < urls.length; i += 10) {
    const answers = await Promise.all(
      urls.slice(i, i + 10).map((url) => hit(url, { method: "POST", body: "{}" })),
    );
    for (const answer of answers) assert.equal(answer.status, 200);
  }
  const grown = heapMib() - before;
  // Kept for ever, each row hit stayed: about 0.95 MiB a source.
  t.diagnostic(`the heap grew ${grown.toFixed(0)} MiB`);
  assert.ok(grown < 80, `the heap grew ${grown.toFixed(0)} MiB`);
  // The first source's row was let go: its endpoint still answers.
  assert.equal((await hit(urls[0]!, { method: "POST", body: "{}" })).status, 200);
});
