/**
 * What the free plan's daily stored bytes (FOUNT_FREE_DAILY_STORED_BYTES) count, where a review found
 * them short: an event of numbers counts its JSON's bytes (one byte a number before: a twelfth of a
 * double's text); a delivery that fails for good counts its `$errors` entry, which names an event over
 * 64 KiB instead of copying it; and a bulk replay stops at the page that finds the day used up.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { deploy, events, fixture, hit } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
const limit = 2_000_000;

before(async () => {
  server = await startServer({}, { FOUNT_FREE_DAILY_STORED_BYTES: String(limit) });
});
after(() => server.close());

async function used(key: string): Promise<number> {
  const res = await server.api("GET", "/v1/users/me", { key });
  assert.equal(res.status, 200, res.text);
  return res.body.data.daily_stored_bytes_used;
}

async function post(endpoint: string, body: unknown): Promise<void> {
  const res = await hit(endpoint, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  await server.built.services.committer.drain();
}

/** Emits one event: an array of `n` doubles, each 23 characters of JSON. */
const doubles = `export default {
  name: "doubles",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  run(e) { this.$emit(new Array(e.body.n).fill(-1.2345678901234568e-300)); },
};`;

test("an event of numbers counts the bytes of its JSON, not one a number", async () => {
  const user = await server.createUser("counts-numbers");
  const s = await deploy(server, { component_code: doubles }, user.key);
  const n = 20_000;
  await post(s.endpoint_url, { n });
  const bytes = JSON.stringify(new Array(n).fill(-1.2345678901234568e-300)).length;
  const counted = await used(user.key);
  assert.ok(counted >= bytes && counted < bytes + 1000, `${counted} bytes counted for ${bytes} stored`);
});

/** A webhook this server refuses to deliver to (a private address), subscribed to `emitter`. */
async function refusedWebhook(key: string, emitter: string): Promise<void> {
  const hook = await server.api("POST", "/v1/webhooks", { key, body: { url: "http://127.0.0.1:9/hook" } });
  assert.equal(hook.status, 200, hook.text);
  const sub = await server.api("POST", "/v1/subscriptions", {
    key,
    body: { emitter_id: emitter, listener_id: hook.body.data.id },
  });
  assert.equal(sub.status, 200, sub.text);
}

async function errorsOf(sourceId: string, key: string): Promise<any[]> {
  for (let i = 0; i < 600; i++) {
    const found = await events(server, sourceId, "$errors", key);
    if (found.length > 0) return found;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail("no $errors entry within 60 s");
}

test("a delivery that fails for good counts its $errors entry; an event over 64 KiB is named there, not copied", async () => {
  const user = await server.createUser("counts-errors");
  const s = await deploy(server, { component_code: fixture("big-events.mjs") }, user.key);
  await refusedWebhook(user.key, s.id);
  await post(s.endpoint_url, { copies: 1, pad: 30_000, from: 0 });
  const [kept] = await events(server, s.id, undefined, user.key);
  const [entry] = await errorsOf(s.id, user.key);
  assert.equal(entry.event.error.code, "destination_refused");
  assert.deepEqual(entry.event.original_event, kept.event, "a small event is copied whole");
  await server.built.services.committer.drain();
  const eventBytes = JSON.stringify(kept.event).length;
  // The event, its delivery's copy, and the $errors entry holding it again.
  const counted = await used(user.key);
  assert.ok(counted >= 3 * eventBytes, `${counted} bytes counted for 3 × ${eventBytes}`);

  const big = await deploy(server, { component_code: fixture("big-events.mjs") }, user.key);
  await refusedWebhook(user.key, big.id);
  const before = await used(user.key);
  await post(big.endpoint_url, { copies: 1, pad: 70_000, from: 0 });
  const [bigKept] = await events(server, big.id, undefined, user.key);
  const [bigEntry] = await errorsOf(big.id, user.key);
  assert.equal(bigEntry.event.original_context.event_id, bigKept.id);
  assert.ok(bigEntry.event.original_event.bytes_at_least >= 70_000);
  assert.match(bigEntry.event.original_event.$omitted, /original_context\.event_id/);
  await server.built.services.committer.drain();
  const bigBytes = JSON.stringify(bigKept.event).length;
  const added = (await used(user.key)) - before;
  assert.ok(added >= 2 * bigBytes && added < 2 * bigBytes + 2000, `${added} bytes for 2 × ${bigBytes}`);
});

test("a bulk replay stops at the page that finds the day's stored bytes used up, saying how far it got", async () => {
  const user = await server.createUser("counts-replay");
  const s = await deploy(
    server,
    { component_code: fixture("big-events.mjs"), retention: { events: 1000 } },
    user.key,
  );
  // 600 events of about 2,500 bytes: 1.5 MB of the day's 2 MB. A replay page holds at most 500.
  await post(s.endpoint_url, { copies: 600, pad: 2500, from: 0 });
  const stored = await used(user.key);
  assert.ok(stored < limit, `${stored} bytes used`);
  const wf = await server.api("POST", "/v1/workflows", { key: user.key, body: { name: "replayed-to" } });
  assert.equal(wf.status, 200, wf.text);
  const res = await server.api("POST", `/v1/sources/${s.id}/events/replay`, {
    key: user.key,
    body: { listener_id: wf.body.data.id },
  });
  assert.equal(res.status, 429, res.text);
  assert.equal(res.body.code, "quota_exceeded");
  assert.deepEqual(res.body.details, { replayed: 500, matching: 600 });
  assert.ok(Number(res.headers.get("retry-after")) > 0);
  const replayedBytes = (await used(user.key)) - stored;
  assert.ok(replayedBytes < (stored * 500) / 600 + 1000, `${replayedBytes} bytes of copies: one page`);
});
