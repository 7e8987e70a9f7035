/**
 * The sources' `this.db` kept in the server's memory stays within FOUNT_DB_CACHE_BYTES however many
 * sources write theirs (each was kept for ever before: a thousand sources of 4 MiB took the heap), and a
 * db let go is read back from the store with every write it had.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { ExecutorPool } from "../../src/runtime/executors/pool.ts";
import { deploy } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

const cacheBytes = 64 * 1024;
const valueBytes = 20_000;
let server: TestServer;

before(async () => {
  server = await startServer({ dbCacheBytes: cacheBytes });
});
after(() => server.close());

async function run(sourceId: string, event: unknown): Promise<any> {
  const res = await server.api("POST", `/v1/sources/${sourceId}/run`, { body: { event } });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.data.ok, true, res.text);
  return res.body.data;
}

async function cachedBytes(): Promise<number> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith("fount_source_db_cache_bytes"));
  assert.ok(line, "the gauge is published");
  return Number(line.slice(line.lastIndexOf(" ") + 1));
}

test("the dbs kept in memory stay within FOUNT_DB_CACHE_BYTES, and a db let go comes back whole", async () => {
  const first = await deploy(server, {
    component_code: `export default { name: "keeper", version: "1", props: { db: "$.service.db" }, async run(e) {
      const before = this.db.get("tag") ?? null;
      const runs = (this.db.get("runs") ?? 0) + 1;
      this.db.set("runs", runs);
      this.db.set("tag", e.tag);
      this.db.set("pad", "x".repeat(${valueBytes}));
      this.$emit({ before, runs });
    } }`,
  });
  const ids: string[] = [first.id];
  for (let i = 1; i < 12; i++) {
    const res = await server.api("POST", "/v1/sources", {
      body: { component_id: first.component_id, name: `keeper-${i}` },
    });
    assert.equal(res.status, 200, res.text);
    ids.push(res.body.data.id);
  }
  // Twelve dbs of about 20 KB: four times what the cache may hold.
  for (const [i, id] of ids.entries()) await run(id, { tag: `first-${i}` });
  const afterFirst = await cachedBytes();
  assert.ok(afterFirst <= cacheBytes, `${afterFirst} bytes cached, over ${cacheBytes}`);
  // Every source sees its own earlier writes, whether its db stayed in memory or came back from the store.
  for (const [i, id] of ids.entries()) {
    const { emits } = await run(id, { tag: `second-${i}` });
    assert.deepEqual(emits[0].event, { before: `first-${i}`, runs: 2 });
  }
  assert.ok((await cachedBytes()) <= cacheBytes);
  // The executor pool lets go of each source's returned writes once the runner applied them.
  const executor = server.built.services.executor;
  assert.ok(executor instanceof ExecutorPool);
  const owners = executor.stats();
  assert.equal(
    owners.reduce((n, o) => n + o.sources, 0),
    0,
    "no source state is kept once its runs are done",
  );
});
