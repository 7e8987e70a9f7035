/**
 * A commit the store refuses while later invocations of the same source are already out: their db
 * writes build on writes that never landed, so they are discarded (`db_stale` on `$errors`) instead of
 * being applied to an empty db, which replaced the stored db with their few keys.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { deploy, emitted, events, hit } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

const keeper = `export default {
  name: "Keeper",
  key: "keeper",
  version: "0.0.1",
  type: "source",
  props: { http: { type: "$.interface.http" }, db: "$.service.db" },
  async run(event) {
    if (event.body?.wait) await new Promise((r) => setTimeout(r, event.body.wait));
    if (this.db.get("keep") === undefined) this.db.set("keep", "first");
    const n = (this.db.get("n") ?? 0) + 1;
    this.db.set("n", n);
    this.$emit({ n, keep: this.db.get("keep") });
  },
};`;

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(async () => {
  await server.close();
});

const post = (url: string, body: unknown) =>
  hit(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

test("an invocation out while an earlier commit failed is discarded, and the stored db stays whole", async () => {
  const source = await deploy(server, { component_code: keeper });
  const url = source.endpoint_url as string;
  assert.equal((await post(url, {})).status, 200);
  assert.deepEqual((await server.built.services.store.getSourceDb(source.id)).data, { keep: "first", n: 1 });

  // The store refuses every transaction until the second hit has its answer (the committer retries a
  // failed group job by job, so the refusal must outlast one attempt).
  const store = server.built.services.store;
  const transaction = store.transaction.bind(store);
  let refusing = true;
  (store as { transaction: typeof store.transaction }).transaction = (fn) =>
    refusing ? Promise.reject(new Error("injected: the store refused the commit")) : transaction(fn);
  try {
    // The third hit is handed to the executor behind the second and returns after its commit failed.
    const second = post(url, {});
    const third = post(url, { wait: 1_500 });
    const refused = await second;
    refusing = false;
    assert.notEqual(refused.status, 200, refused.text);
    const late = await third;
    assert.notEqual(late.status, 200, `the late invocation was acknowledged: ${late.text}`);
  } finally {
    (store as { transaction: typeof store.transaction }).transaction = transaction;
  }

  assert.deepEqual(
    (await store.getSourceDb(source.id)).data,
    { keep: "first", n: 1 },
    "the stored db is whole",
  );
  const errors = (await events(server, source.id, "$errors")).map((e) => e.event.error.code);
  assert.ok(errors.includes("db_stale"), `$errors: ${errors}`);
  // The next invocation reads the stored db again, and the executor takes it over its own copy.
  assert.equal((await post(url, {})).status, 200);
  assert.deepEqual((await emitted(server, source.id)).at(-1), { n: 2, keep: "first" });
});
