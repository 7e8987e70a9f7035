/**
 * Channels and scheduled delivery: dedupe state is kept per channel, and `$emit` meta `delivery_ts`
 * holds an event back from its listeners until then, visible on each listener's `$in` channel, where
 * deleting it cancels it. A self-scheduling source works end to end on real time.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { deploy, events, fixture, hit } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(() => server.close());

/** Polls `check` until it returns a value, for up to `timeoutMs` (generous: the machine may be loaded). */
async function waitFor<T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

test("an id emitted on one channel is still emitted on another channel (dedupe is per channel)", async () => {
  const s = await deploy(server, { component_code: fixture("channel-dedupe.mjs") });
  const run = async (items: Array<{ id: string; name?: string }>) => {
    const res = await server.api("POST", `/v1/sources/${s.id}/run`, { body: { event: { items } } });
    assert.equal(res.status, 200, res.text);
    return res.body.data.emits.map(
      (e: { event: { id: string; name?: string } }) => `${e.event.name ?? ""}:${e.event.id}`,
    );
  };
  assert.deepEqual(await run([{ id: "a", name: "self" }]), ["self:a"]);
  assert.deepEqual(await run([{ id: "a" }]), [":a"], "the default channel has not seen a");
  assert.deepEqual(await run([{ id: "a" }, { id: "a", name: "self" }, { id: "b", name: "self" }]), [
    "self:b",
  ]);
  assert.deepEqual(
    (await events(server, s.id)).map((e) => e.event.id),
    ["a"],
  );
  assert.deepEqual(
    (await events(server, s.id, "self")).map((e) => e.event.id),
    ["b", "a"],
  );
});

test("a self-scheduling source delivers a task delayed by 3 s after 3 s, once, and never a cancelled one", async () => {
  const s = await deploy(server, { component_code: fixture("task-scheduler.mjs") });
  const endpoint: string = s.endpoint_url;
  // The self-subscription, through the API as the component's own Pipedream app file would make it.
  const sub = await server.api(
    "POST",
    `/v1/subscriptions?emitter_id=${s.id}&listener_id=${s.id}&event_name=self`,
  );
  assert.equal(sub.status, 200, sub.text);

  const start = Date.now();
  const at = new Date(start + 3000).toISOString();
  const schedule = (name: string) =>
    hit(`${endpoint}/schedule`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name, timestamp: at }),
    });
  const kept = await schedule("kept");
  assert.equal(kept.status, 200, kept.text);
  assert.equal(kept.body.id, "task-kept");
  const cancelled = await schedule("cancelled");
  assert.equal(cancelled.status, 200, cancelled.text);

  // Both wait on the source's $in channel, with the emit's metadata (a custom response may answer
  // before the invocation's emits are committed, so the list is polled).
  const queued = await waitFor("both tasks on $in", async () => {
    const res = await server.api("GET", `/v1/sources/${s.id}/event_summaries?event_name=$in`);
    assert.equal(res.status, 200, res.text);
    return res.body.data.length === 2 ? res : undefined;
  });
  assert.deepEqual(queued.body.data.map((e: { metadata: { id: string } }) => e.metadata.id).sort(), [
    "task-cancelled",
    "task-kept",
  ]);
  for (const e of queued.body.data) assert.equal(e.metadata.delivery_ts, Date.parse(at));
  assert.equal(queued.body.page_info.end_cursor, null);

  // Cancelled the way Pipedream's task scheduler does it: by the entry's ID on $in.
  const entry = queued.body.data.find(
    (e: { metadata: { id: string } }) => e.metadata.id === "task-cancelled",
  );
  const del = await server.api(
    "DELETE",
    `/v1/sources/${s.id}/events?start_id=${entry.id}&end_id=${entry.id}&event_name=$in`,
  );
  assert.equal(del.status, 202, del.text);
  assert.equal(del.body.data.deleted, 1);
  const left = await server.api("GET", `/v1/sources/${s.id}/events?event_name=$in`);
  assert.deepEqual(
    left.body.data.map((e: { metadata: { id: string } }) => e.metadata.id),
    ["task-kept"],
  );

  const delivered = await waitFor("the kept task", async () => {
    const list = await events(server, s.id);
    return list.length > 0 ? list : undefined;
  });
  assert.equal(delivered.length, 1);
  assert.equal(delivered[0].event.name, "kept");
  assert.equal(delivered[0].metadata.id, "task-kept", "the same id as on the self channel, not deduped");
  assert.ok(delivered[0].event.delivered_at >= Date.parse(at), "not delivered before its delivery_ts");
  assert.ok(delivered[0].indexed_at_ms >= Date.parse(at));

  // Nothing is left waiting; a while past the due time, still one task and never the cancelled one.
  await waitFor("an empty $in", async () => {
    const res = await server.api("GET", `/v1/sources/${s.id}/event_summaries?event_name=$in`);
    return res.body.data.length === 0 ? true : undefined;
  });
  await sleep(1500);
  const final = await events(server, s.id);
  assert.deepEqual(
    final.map((e) => e.event.name),
    ["kept"],
  );
});

test("a scheduled delivery does not hold back later events of the same subscription", async () => {
  const s = await deploy(server, { component_code: fixture("task-scheduler.mjs") });
  const sub = await server.api("POST", "/v1/subscriptions", {
    body: { emitter_id: s.id, listener_id: s.id, event_name: "self" },
  });
  assert.equal(sub.status, 200, sub.text);
  const schedule = (name: string, inMs: number) =>
    hit(`${s.endpoint_url}/schedule`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name, timestamp: new Date(Date.now() + inMs).toISOString() }),
    });
  assert.equal((await schedule("later", 3_600_000)).status, 200);
  await waitFor("the later task on $in", async () => {
    const res = await server.api("GET", `/v1/sources/${s.id}/event_summaries?event_name=$in`);
    return res.body.data.length === 1 ? true : undefined;
  });
  assert.equal((await schedule("now", 0)).status, 200);
  const delivered = await waitFor("the task due now", async () => {
    const list = await events(server, s.id);
    return list.length > 0 ? list : undefined;
  });
  assert.deepEqual(
    delivered.map((e) => e.event.name),
    ["now"],
  );
  const queued = await server.api("GET", `/v1/sources/${s.id}/event_summaries?event_name=$in`);
  assert.deepEqual(
    queued.body.data.map((e: { metadata: { id: string } }) => e.metadata.id),
    ["task-later"],
  );
});
