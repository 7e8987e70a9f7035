/**
 * Bounds on what one tenant's subscriptions make the store write in one transaction: at most
 * FOUNT_MAX_LISTENERS_PER_EMITTER subscriptions route an emitter's events (globs and auto-subscriptions
 * counted for each source they cover; one more is a 409), and a backfill queues only for a subscription
 * it creates, at most the newest 10,000 kept events and 32 MiB of their JSON, oldest first.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { deploy } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";
import { assertApiError, unique } from "./openapi-walk.ts";

const burst = `export default { name: "burst", version: "1", async run(e) {
  const pad = "x".repeat(e.bytes ?? 0);
  for (let i = 0; i < (e.n ?? 0); i++) this.$emit({ i: (e.from ?? 0) + i, pad });
} }`;

const cap = 3;
let server: TestServer;
before(async () => {
  server = await startServer({}, { FOUNT_MAX_LISTENERS_PER_EMITTER: String(cap) });
});
after(() => server.close());

/** A user with `hooks` webhooks: inactive, so that what is queued for them stays queued. */
async function tenant(hooks: number) {
  const user = await server.createUser(unique("fan"));
  const webhooks: string[] = [];
  for (let i = 0; i < hooks; i++) {
    const res = await server.api("POST", "/v1/webhooks", {
      key: user.key,
      body: { url: "https://example.com/h" },
    });
    assert.equal(res.status, 200, res.text);
    const off = await server.api("PUT", `/v1/webhooks/${res.body.data.id}`, {
      key: user.key,
      body: { active: false },
    });
    assert.equal(off.status, 200, off.text);
    webhooks.push(res.body.data.id);
  }
  return { ...user, webhooks };
}

function subscribe(key: string, body: Record<string, unknown>) {
  return server.api("POST", "/v1/subscriptions", { key, body });
}

async function run(key: string, sourceId: string, event: Record<string, number>): Promise<void> {
  const res = await server.api("POST", `/v1/sources/${sourceId}/run`, { key, body: { event } });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.data.ok, true, JSON.stringify(res.body.data.error));
}

/** The events of the deliveries queued for a webhook, newest first (all, or the first page), and how many. */
async function queued(
  key: string,
  webhook: string,
  all = false,
): Promise<{ total: number; events: string[] }> {
  const events: string[] = [];
  let cursor = "";
  for (;;) {
    const page = `limit=100${cursor ? `&after=${cursor}` : ""}`;
    const res = await server.api("GET", `/v1/webhooks/${webhook}/deliveries?${page}`, { key });
    assert.equal(res.status, 200, res.text);
    events.push(...res.body.data.map((d: { event_id: string }) => d.event_id));
    cursor = res.body.page_info.end_cursor;
    if (!all || !cursor) return { total: res.body.page_info.total_count, events };
  }
}

/** Every event ID of a source's default channel, oldest first. */
async function eventIds(key: string, sourceId: string): Promise<string[]> {
  const ids: string[] = [];
  let cursor = "";
  for (;;) {
    const res = await server.api(
      "GET",
      `/v1/sources/${sourceId}/event_summaries?limit=100${cursor ? `&after=${cursor}` : ""}`,
      { key },
    );
    assert.equal(res.status, 200, res.text);
    ids.push(...res.body.data.map((e: { id: string }) => e.id));
    if (!res.body.page_info.end_cursor) return ids.reverse();
    cursor = res.body.page_info.end_cursor;
  }
}

test("one subscription past the cap on an emitter's listeners is a 409; the existing ones still answer", async () => {
  const t = await tenant(cap + 1);
  const source = await deploy(server, { component_code: burst }, t.key);
  const made = [];
  for (const hook of t.webhooks.slice(0, cap)) {
    // Listeners on other channels count too: each copies the events of its channel.
    const res = await subscribe(t.key, { emitter_id: source.id, listener_id: hook, event_name: hook });
    assert.equal(res.status, 200, res.text);
    made.push(res.body.data);
  }
  const over = await subscribe(t.key, { emitter_id: source.id, listener_id: t.webhooks[cap] });
  assertApiError(over, { status: 409, code: "conflict" });
  assert.match(over.body.error, /At most 3 subscriptions/);
  assert.equal(over.body.details.field, "emitter_id");
  // Creating an existing one again returns it, at the cap too.
  const again = await subscribe(t.key, {
    emitter_id: source.id,
    listener_id: t.webhooks[0],
    event_name: t.webhooks[0],
  });
  assert.equal(again.status, 200, again.text);
  assert.deepEqual(again.body.data, made[0]);
  // Nothing of the refused one was stored; deleting one makes room.
  const del = await server.api(
    "DELETE",
    `/v1/subscriptions?emitter_id=${source.id}&listener_id=${t.webhooks[0]}&event_name=${t.webhooks[0]}`,
    { key: t.key },
  );
  assert.equal(del.status, 200, del.text);
  const room = await subscribe(t.key, { emitter_id: source.id, listener_id: t.webhooks[cap] });
  assert.equal(room.status, 200, room.text);
  await run(t.key, source.id, { n: 2 });
  assert.equal((await queued(t.key, t.webhooks[cap])).total, 2);
});

test("a dc_* glob and an auto-subscription count against every source they cover", async () => {
  const t = await tenant(cap + 1);
  const busy = await deploy(server, { component_code: burst }, t.key);
  for (const hook of t.webhooks.slice(0, 2)) {
    const res = await subscribe(t.key, { emitter_id: busy.id, listener_id: hook });
    assert.equal(res.status, 200, res.text);
  }
  // The glob makes the busy source's third listener; another glob would make its fourth.
  const glob = await subscribe(t.key, { emitter_id: "dc_*", listener_id: t.webhooks[2] });
  assert.equal(glob.status, 200, glob.text);
  assertApiError(await subscribe(t.key, { emitter_id: "dc_*", listener_id: t.webhooks[3] }), {
    status: 409,
    code: "conflict",
  });
  assertApiError(await subscribe(t.key, { emitter_id: busy.id, listener_id: t.webhooks[3] }), {
    status: 409,
    code: "conflict",
  });
  // Each new source gets a subscription per auto-subscription, beside the glob: two rules fill it.
  const auto = (listener: string) =>
    server.api("POST", "/v1/auto_subscriptions", {
      key: t.key,
      body: { listener_id: listener, event_name: "" },
    });
  assert.equal(
    (
      await server.api("DELETE", `/v1/subscriptions?emitter_id=${busy.id}&listener_id=${t.webhooks[0]}`, {
        key: t.key,
      })
    ).status,
    200,
  );
  for (const hook of t.webhooks.slice(0, 2)) assert.equal((await auto(hook)).status, 200);
  assertApiError(await auto(t.webhooks[3]), { status: 409, code: "conflict" });
  const fresh = await deploy(server, { component_code: burst }, t.key);
  await run(t.key, fresh.id, { n: 1 });
  const routed = await Promise.all(t.webhooks.map(async (w) => (await queued(t.key, w)).total));
  // The fresh source's event went to its two rules' subscriptions and to the glob.
  assert.deepEqual(routed, [1, 1, 1, 0]);
  // Another tenant's glob covers only that tenant's sources: this tenant's full one does not refuse it.
  const other = await tenant(1);
  const res = await subscribe(other.key, { emitter_id: "dc_*", listener_id: other.webhooks[0] });
  assert.equal(res.status, 200, res.text);
});

test("backfill queues only when it creates the subscription: posting it again queues nothing more", async () => {
  const t = await tenant(1);
  const source = await deploy(server, { component_code: burst }, t.key);
  await run(t.key, source.id, { n: 3 });
  const body = { emitter_id: source.id, listener_id: t.webhooks[0], backfill: true };
  const first = await subscribe(t.key, body);
  assert.equal(first.status, 200, first.text);
  const second = await subscribe(t.key, body);
  assert.equal(second.status, 200, second.text);
  assert.deepEqual(second.body.data, first.body.data);
  const { total, events } = await queued(t.key, t.webhooks[0]);
  assert.equal(total, 3);
  assert.deepEqual(events.reverse(), await eventIds(t.key, source.id));
});

test("a backfill queues the newest events that fit in 32 MiB of JSON, oldest first", async () => {
  const t = await tenant(1);
  const source = await deploy(server, { component_code: burst }, t.key);
  // 40 events of about 1 MB: the newest 33 fit in 32 MiB.
  await run(t.key, source.id, { n: 40, bytes: 1_000_000 });
  const sub = await subscribe(t.key, { emitter_id: source.id, listener_id: t.webhooks[0], backfill: true });
  assert.equal(sub.status, 200, sub.text);
  const { total, events } = await queued(t.key, t.webhooks[0]);
  assert.equal(total, 33);
  assert.deepEqual(events.reverse(), (await eventIds(t.key, source.id)).slice(-33));
});

test("a backfill queues at most the newest 10,000 kept events, oldest first", async () => {
  const t = await tenant(1);
  const source = await deploy(
    server,
    { component_code: burst, retention: { events: 20_000 } } as never,
    t.key,
  );
  for (let from = 0; from < 10_002; from += 1000)
    await run(t.key, source.id, { n: Math.min(1000, 10_002 - from), from });
  const sub = await subscribe(t.key, { emitter_id: source.id, listener_id: t.webhooks[0], backfill: true });
  assert.equal(sub.status, 200, sub.text);
  const { total, events } = await queued(t.key, t.webhooks[0], true);
  assert.equal(total, 10_000);
  // The oldest two are left out; the rest are queued oldest first.
  assert.deepEqual(events.reverse(), (await eventIds(t.key, source.id)).slice(2));
});
