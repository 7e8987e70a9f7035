/**
 * A backfill cannot be repeated for free: deleting a subscription deletes what it had not delivered, so
 * creating it again (with backfill) queues the events once more instead of on top, and an account may
 * start at most 10 backfills an hour, counted in the store (one more is a 429 with Retry-After, the
 * subscription not created).
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { deploy } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";
import { assertApiError, unique } from "./openapi-walk.ts";

const burst = `export default { name: "burst", version: "1", async run(e) {
  for (let i = 0; i < (e.n ?? 0); i++) this.$emit({ i });
} }`;

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(() => server.close());

/** A user with one inactive webhook (what is queued for it stays pending) and a source with `n` events. */
async function tenant(n: number) {
  const user = await server.createUser(unique("bf"));
  const hook = await server.api("POST", "/v1/webhooks", {
    key: user.key,
    body: { url: "https://example.com/h" },
  });
  assert.equal(hook.status, 200, hook.text);
  const off = await server.api("PUT", `/v1/webhooks/${hook.body.data.id}`, {
    key: user.key,
    body: { active: false },
  });
  assert.equal(off.status, 200, off.text);
  const source = await deploy(server, { component_code: burst }, user.key);
  const run = await server.api("POST", `/v1/sources/${source.id}/run`, {
    key: user.key,
    body: { event: { n } },
  });
  assert.equal(run.status, 200, run.text);
  return { key: user.key, webhook: hook.body.data.id as string, source: source.id as string };
}

async function pending(key: string, webhook: string): Promise<number> {
  const res = await server.api("GET", `/v1/webhooks/${webhook}/deliveries?limit=1`, { key });
  assert.equal(res.status, 200, res.text);
  return res.body.page_info.total_count;
}

function subscribe(key: string, body: Record<string, unknown>) {
  return server.api("POST", "/v1/subscriptions", { key, body });
}

function unsubscribe(key: string, emitter: string, listener: string) {
  return server.api("DELETE", `/v1/subscriptions?emitter_id=${emitter}&listener_id=${listener}`, { key });
}

test("deleting a subscription deletes its undelivered deliveries, so a backfill again queues them once", async () => {
  const t = await tenant(3);
  const body = { emitter_id: t.source, listener_id: t.webhook, backfill: true };
  for (let i = 0; i < 3; i++) {
    const sub = await subscribe(t.key, body);
    assert.equal(sub.status, 200, sub.text);
    assert.equal(await pending(t.key, t.webhook), 3);
    const del = await unsubscribe(t.key, t.source, t.webhook);
    assert.equal(del.status, 200, del.text);
    assert.equal(await pending(t.key, t.webhook), 0);
  }
});

test("deleting one subscription leaves another's deliveries to the same listener", async () => {
  const t = await tenant(2);
  const other = await deploy(server, { component_code: burst }, t.key);
  await server.api("POST", `/v1/sources/${other.id}/run`, { key: t.key, body: { event: { n: 4 } } });
  assert.equal(
    (await subscribe(t.key, { emitter_id: t.source, listener_id: t.webhook, backfill: true })).status,
    200,
  );
  assert.equal(
    (await subscribe(t.key, { emitter_id: other.id, listener_id: t.webhook, backfill: true })).status,
    200,
  );
  assert.equal(await pending(t.key, t.webhook), 6);
  assert.equal((await unsubscribe(t.key, t.source, t.webhook)).status, 200);
  assert.equal(await pending(t.key, t.webhook), 4);
});

test("an account starts at most 10 backfills an hour: the 11th is a 429 and creates nothing", async () => {
  const t = await tenant(1);
  // A backfill that finds nothing to copy is not counted.
  const empty = await deploy(server, { component_code: burst }, t.key);
  const none = await subscribe(t.key, { emitter_id: empty.id, listener_id: t.webhook, backfill: true });
  assert.equal(none.status, 200, none.text);
  for (let i = 0; i < 10; i++) {
    const sub = await subscribe(t.key, { emitter_id: t.source, listener_id: t.webhook, backfill: true });
    assert.equal(sub.status, 200, sub.text);
    assert.equal((await unsubscribe(t.key, t.source, t.webhook)).status, 200);
  }
  const res = await subscribe(t.key, { emitter_id: t.source, listener_id: t.webhook, backfill: true });
  assertApiError(res, { status: 429, code: "rate_limited" });
  assert.match(res.body.error, /10 backfills an hour/);
  const retry = Number(res.headers.get("retry-after"));
  assert.ok(retry > 3000 && retry <= 3600, String(retry));
  const list = await server.api("GET", "/v1/users/me/subscriptions", { key: t.key });
  assert.deepEqual(
    list.body.data.map((s: { emitter_id: string }) => s.emitter_id),
    [empty.id],
  );
  // Without backfill the same subscription is created; another account is not held back.
  assert.equal((await subscribe(t.key, { emitter_id: t.source, listener_id: t.webhook })).status, 200);
  const u = await tenant(1);
  assert.equal(
    (await subscribe(u.key, { emitter_id: u.source, listener_id: u.webhook, backfill: true })).status,
    200,
  );
});

test("the backfill count is kept in the store: a restart and the API limiter's pruning leave it", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-bf-"));
  const first = await startServer({ dataDir });
  let second: TestServer | undefined;
  try {
    const user = await first.createUser(unique("bfr"));
    const hook = await first.api("POST", "/v1/webhooks", {
      key: user.key,
      body: { url: "https://example.com/h" },
    });
    assert.equal(hook.status, 200, hook.text);
    await first.api("PUT", `/v1/webhooks/${hook.body.data.id}`, { key: user.key, body: { active: false } });
    const source = await deploy(first, { component_code: burst }, user.key);
    await first.api("POST", `/v1/sources/${source.id}/run`, { key: user.key, body: { event: { n: 1 } } });
    const query = `emitter_id=${source.id}&listener_id=${hook.body.data.id}`;
    const body = { emitter_id: source.id, listener_id: hook.body.data.id, backfill: true };
    for (let i = 0; i < 10; i++) {
      const sub = await first.api("POST", "/v1/subscriptions", { key: user.key, body });
      assert.equal(sub.status, 200, sub.text);
      assert.equal((await first.api("DELETE", `/v1/subscriptions?${query}`, { key: user.key })).status, 200);
    }
    await first.close();
    second = await startServer({ dataDir });
    // What the API rate limiter's store prunes a minute later: the windows that ended by then.
    await second.built.services.store.pruneRateLimits(Date.now() + 60_000);
    const res = await second.api("POST", "/v1/subscriptions", { key: user.key, body });
    assertApiError(res, { status: 429, code: "rate_limited" });
    const retry = Number(res.headers.get("retry-after"));
    assert.ok(retry > 3000 && retry <= 3600, String(retry));
  } finally {
    await (second ?? first).close().catch(() => undefined);
    rmSync(dataDir, { recursive: true, force: true });
  }
});
