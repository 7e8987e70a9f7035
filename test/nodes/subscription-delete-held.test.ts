/**
 * A subscription deleted through one node: the deliveries of it that another node's dispatcher holds in
 * memory (claimed, waiting for a slot of their host) are not sent once that node heard the deletion on
 * the cluster channel. Two servers, each its own node, on one PostgreSQL schema; only the first sends.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { Gate } from "../delivery/receiver.ts";
import type { TestServer } from "../helpers.ts";
import { startNodes as startClusterNodes } from "./nodes.ts";

/** Two servers on one fresh schema, each its own node; only the first runs its dispatcher. */
async function startNodes(): Promise<[TestServer, TestServer]> {
  const [a, b] = await startClusterNodes(2, "withdrawer", (i) => ({
    overrides: { webhookAllowPrivate: true },
    build: { startDispatcher: i === 0 },
  }));
  return [a!, b!];
}

const burst = `export default { name: "burst", version: "1", async run(e) {
  for (let i = 0; i < (e.n ?? 0); i++) this.$emit({ i });
} }`;

async function until(ok: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (!ok()) {
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

test("a subscription deleted through one node: the deliveries another node holds of it are not sent", async () => {
  const [a, b] = await startNodes();
  const perHost = 4;
  const dispatcher = a.built.services.dispatcher;
  dispatcher.options.maxPerHost = perHost;
  // The receiver holds every request until told, and answers the later ones at once.
  const receiver = await Gate.start();
  after(() => receiver.close());
  const url = receiver.url;

  const hook = await a.api("POST", "/v1/webhooks", { body: { url } });
  assert.equal(hook.status, 200, hook.text);
  const source = await a.api("POST", "/v1/sources", {
    body: { component_code: burst, retention: { events: 300 } },
  });
  assert.equal(source.status, 200, source.text);
  const sourceId = source.body.data.id as string;
  const webhook = hook.body.data.id as string;
  const sub = await a.api("POST", "/v1/subscriptions", {
    body: { emitter_id: sourceId, listener_id: webhook },
  });
  assert.equal(sub.status, 200, sub.text);
  const run = await a.api("POST", `/v1/sources/${sourceId}/run`, { body: { event: { n: 300 } } });
  assert.equal(run.status, 200, run.text);
  await until(() => receiver.bodies.length === perHost, "the receiver to hold a request per slot");

  let heard = false;
  const off = a.built.services.bus.on("deliveries.withdrawn", (w) => {
    if (w.remote && w.subscriptionIds?.includes(sub.body.data.id)) heard = true;
  });
  const del = await b.api("DELETE", `/v1/subscriptions?emitter_id=${sourceId}&listener_id=${webhook}`);
  assert.equal(del.status, 200, del.text);
  // The first node hears it on the cluster channel (a NOTIFY: milliseconds).
  await until(() => heard, "the deletion to reach the first node");
  off();
  assert.equal(receiver.bodies.length, perHost);
  receiver.open();
  await dispatcher.drain();
  await new Promise((resolve) => setTimeout(resolve, 200));
  assert.equal(
    receiver.bodies.length,
    perHost,
    "a delivery of the deleted subscription was sent after the DELETE",
  );
});
