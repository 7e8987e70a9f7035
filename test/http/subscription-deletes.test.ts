/**
 * Deleting a subscription with a backlog past one batch (docs/delivery.md, "Deleting a subscription"):
 * the DELETE answers after one batch, the rest of its pending deliveries are deleted in the background,
 * a batch a transaction, and a restart resumes what a stop interrupted.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { deliveryDeleteBatch } from "../../src/storage/subscription-deletes.ts";
import { deploy } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";
import { unique } from "./openapi-walk.ts";

const burst = `export default { name: "burst", version: "1", async run(e) {
  for (let i = 0; i < (e.n ?? 0); i++) this.$emit({ i });
} }`;

/** More than a batch: the delete leaves some to the sweep. */
const backlog = deliveryDeleteBatch + 500;

/** A user's inactive webhook (what is queued for it stays pending) subscribed with backfill to `backlog` events. */
async function backlogged(server: TestServer) {
  const user = await server.createUser(unique("sd"));
  const hook = await server.api("POST", "/v1/webhooks", {
    key: user.key,
    body: { url: "https://example.com/h" },
  });
  assert.equal(hook.status, 200, hook.text);
  const webhook = hook.body.data.id as string;
  const off = await server.api("PUT", `/v1/webhooks/${webhook}`, { key: user.key, body: { active: false } });
  assert.equal(off.status, 200, off.text);
  // A window that keeps them all (the default keeps 100 a channel), so that the backfill copies them.
  const source = await deploy(
    server,
    { component_code: burst, retention: { events: backlog } } as never,
    user.key,
  );
  // A run emits at most 1,000 events.
  for (let n = backlog; n > 0; n -= 1000) {
    const run = await server.api("POST", `/v1/sources/${source.id}/run`, {
      key: user.key,
      body: { event: { n: Math.min(n, 1000) } },
    });
    assert.equal(run.status, 200, run.text);
  }
  const body = { emitter_id: source.id, listener_id: webhook, backfill: true };
  const sub = await server.api("POST", "/v1/subscriptions", { key: user.key, body });
  assert.equal(sub.status, 200, sub.text);
  return { user, webhook, source: source.id as string, body };
}

async function pending(server: TestServer, key: string, webhook: string): Promise<number> {
  const res = await server.api("GET", `/v1/webhooks/${webhook}/deliveries?limit=1`, { key });
  assert.equal(res.status, 200, res.text);
  return res.body.page_info.total_count;
}

/** Waits (generously: the machine may be loaded) until `webhook` has no pending delivery. */
async function drained(server: TestServer, key: string, webhook: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  while ((await pending(server, key, webhook)) > 0) {
    assert.ok(Date.now() < deadline, "the deleted subscription's deliveries were not all deleted");
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

test("deleting a subscription with a large backlog deletes it in batches after the answer", async () => {
  const server = await startServer();
  try {
    const t = await backlogged(server);
    assert.equal(await pending(server, t.user.key, t.webhook), backlog);
    const del = await server.api(
      "DELETE",
      `/v1/subscriptions?emitter_id=${t.source}&listener_id=${t.webhook}`,
      {
        key: t.user.key,
      },
    );
    assert.equal(del.status, 200, del.text);
    await drained(server, t.user.key, t.webhook);
    // Created again, its backfill queues the events once.
    const again = await server.api("POST", "/v1/subscriptions", { key: t.user.key, body: t.body });
    assert.equal(again.status, 200, again.text);
    assert.equal(await pending(server, t.user.key, t.webhook), backlog);
  } finally {
    await server.close();
  }
});

test("a restart resumes deleting what a deleted subscription left", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-sd-"));
  const first = await startServer({ dataDir });
  let second: TestServer | undefined;
  try {
    const t = await backlogged(first);
    // Deleted in the store, as a node that stopped right after the DELETE's transaction left it.
    const match = { emitterId: t.source, listenerId: t.webhook, eventName: "" };
    const store = first.built.services.store;
    await store.transaction((tx) => tx.deleteSubscriptions([t.user.id], match));
    assert.equal(await pending(first, t.user.key, t.webhook), backlog - deliveryDeleteBatch);
    await first.close();
    second = await startServer({ dataDir });
    await drained(second, t.user.key, t.webhook);
  } finally {
    await (second ?? first).close().catch(() => undefined);
    rmSync(dataDir, { recursive: true, force: true });
  }
});
