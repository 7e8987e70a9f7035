/**
 * FOUNT_MAX_RUN_ROUTED_BYTES: every listener gets its own copy of each event, written in the commit that
 * stores it, so a run whose emits its listeners would copy past the bound fails whole (`fan_out_too_large`
 * on `$errors`; nothing stored or queued, its db writes discarded), and the same run with fewer listeners
 * goes through.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { deploy, events } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

const bound = 30_000;
let server: TestServer;
before(async () => {
  server = await startServer(
    {},
    { FOUNT_MAX_LISTENERS_PER_EMITTER: "3", FOUNT_MAX_RUN_ROUTED_BYTES: String(bound) },
  );
});
after(() => server.close());

async function run(sourceId: string, event: unknown): Promise<any> {
  const res = await server.api("POST", `/v1/sources/${sourceId}/run`, { body: { event } });
  assert.equal(res.status, 200, res.text);
  return res.body.data;
}

/** An inactive webhook (what is queued for it stays queued) subscribed to the source. */
async function listener(sourceId: string): Promise<string> {
  const hook = await server.api("POST", "/v1/webhooks", { body: { url: "https://example.com/h" } });
  assert.equal(hook.status, 200, hook.text);
  const id = hook.body.data.id;
  assert.equal((await server.api("PUT", `/v1/webhooks/${id}`, { body: { active: false } })).status, 200);
  const sub = await server.api("POST", "/v1/subscriptions", {
    body: { emitter_id: sourceId, listener_id: id },
  });
  assert.equal(sub.status, 200, sub.text);
  return id;
}

async function queued(webhook: string): Promise<number> {
  const res = await server.api("GET", `/v1/webhooks/${webhook}/deliveries`);
  assert.equal(res.status, 200, res.text);
  return res.body.page_info.total_count;
}

test("a run its listeners would copy past FOUNT_MAX_RUN_ROUTED_BYTES fails whole; with fewer listeners it goes through", async () => {
  const source = await deploy(server, {
    component_code: `export default { name: "big", version: "1", props: { db: "$.service.db" }, async run(e) {
      const runs = (this.db.get("runs") ?? 0) + 1;
      this.db.set("runs", runs);
      this.$emit({ runs, pad: "x".repeat(e.bytes) });
    } }`,
  });
  const hooks = [await listener(source.id), await listener(source.id)];
  // Two copies of 12 KB: within the bound.
  const first = await run(source.id, { bytes: 12_000 });
  assert.equal(first.ok, true, JSON.stringify(first.error));
  assert.equal(first.emits[0].event.runs, 1);
  hooks.push(await listener(source.id));
  // Three copies: over it. Nothing of the run is kept but its error.
  const refused = await run(source.id, { bytes: 12_000 });
  assert.equal(refused.ok, false);
  assert.equal(refused.error.code, "fan_out_too_large");
  assert.equal(refused.emits.length, 0);
  const [entry] = await events(server, source.id, "$errors");
  assert.equal(entry.event.error.code, "fan_out_too_large");
  assert.match(entry.event.error.message, /FOUNT_MAX_RUN_ROUTED_BYTES/);
  assert.equal((await events(server, source.id)).length, 1, "the refused run stored no event");
  for (const hook of hooks) assert.equal(await queued(hook), hook === hooks[2] ? 0 : 1);
  // Its db write was discarded, in the runner's cache and the executor's copy alike.
  const small = await run(source.id, { bytes: 10 });
  assert.equal(small.ok, true, JSON.stringify(small.error));
  assert.equal(small.emits[0].event.runs, 2);
});
