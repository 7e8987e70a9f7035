/**
 * The free plan's daily stored-bytes quota (FOUNT_FREE_DAILY_STORED_BYTES, 20,000 here): every event a
 * run stores and every delivery copy routing makes of it count in the day's usage; the run that crosses
 * the limit completes and is kept, the next hit gets 429 `quota_exceeded` with `Retry-After`, timers wait
 * with one `$errors` note, workflow emits and the notes of work left after a run count too, and a paid
 * account is never limited. On a fake clock.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { usageDay } from "../../src/domain/accounts/quotas.ts";
import {
  deploy,
  emitted,
  events,
  FakeClock,
  fixture,
  hit,
  startClockServer,
} from "../fixtures/components/fixtures.ts";
import type { TestServer } from "../helpers.ts";

let server: TestServer;
const clock = new FakeClock("2026-05-20T08:00:00Z");
const limit = 20_000;

before(async () => {
  server = await startClockServer(clock, { env: { FOUNT_FREE_DAILY_STORED_BYTES: String(limit) } });
});
after(() => server.close());

async function me(key: string) {
  const res = await server.api("GET", "/v1/users/me", { key });
  assert.equal(res.status, 200, res.text);
  return res.body.data;
}

/** Hits a big-events source: `copies` emits of about `pad` bytes each; answers once the commit landed. */
async function emitBig(endpoint: string, copies: number, pad: number) {
  const res = await hit(endpoint, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ copies, pad, from: 0 }),
  });
  await server.built.services.committer.drain();
  return res;
}

test("a free account's stored bytes count per run; the run that crosses the limit is kept, the next gets 429", async () => {
  const user = await server.createUser("bytes-free");
  const s = await deploy(server, { component_code: fixture("big-events.mjs") }, user.key);
  const endpoint: string = s.configured_props.http.endpoint_url;
  const fresh = await me(user.key);
  assert.equal(fresh.daily_stored_bytes_quota, limit);
  assert.equal(fresh.daily_stored_bytes_used, 0);

  assert.equal((await emitBig(endpoint, 2, 4000)).status, 200);
  const one = (await me(user.key)).daily_stored_bytes_used;
  // Two events of 4,000 characters of padding, their keys and their meta (about 100 bytes each).
  assert.ok(one >= 8000 && one < 8600, `one run stored ${one} bytes`);
  assert.equal((await emitBig(endpoint, 2, 4000)).status, 200);
  assert.equal((await me(user.key)).daily_stored_bytes_used, 2 * one, "the same run stores as much again");

  // 16,000-odd used, below 20,000: this run may start, and it crosses the limit.
  assert.equal((await emitBig(endpoint, 2, 4000)).status, 200);
  const crossed = await me(user.key);
  assert.equal(crossed.daily_stored_bytes_used, 3 * one);
  assert.ok(crossed.daily_stored_bytes_used >= limit);
  assert.equal((await emitted(server, s.id, user.key)).length, 6, "the run that crossed the limit was kept");

  const refused = await emitBig(endpoint, 2, 4000);
  assert.equal(refused.status, 429, JSON.stringify(refused.body));
  assert.equal(refused.body.code, "quota_exceeded");
  assert.match(refused.body.error, /stored-bytes/);
  const retryAfter = Number(refused.headers.get("retry-after"));
  assert.equal(retryAfter, 16 * 3600, "until the next UTC day");
  const run = await server.api("POST", `/v1/sources/${s.id}/run`, { key: user.key, body: {} });
  assert.equal(run.status, 429, run.text);
  const last = await me(user.key);
  assert.equal(last.daily_stored_bytes_used, 3 * one, "refused hits store nothing");
  assert.equal(last.daily_invocations_used, 3);
  assert.equal((await emitted(server, s.id, user.key)).length, 6);
});

test("delivery copies count: a listened-to source's same run stores its bytes once per listener more", async () => {
  const user = await server.createUser("bytes-routed");
  const quiet = await deploy(server, { component_code: fixture("big-events.mjs") }, user.key);
  const heard = await deploy(server, { component_code: fixture("big-events.mjs") }, user.key);
  // Two workflows without a url: their deliveries are recorded as delivered, nothing is sent.
  for (const name of ["one", "two"]) {
    const wf = await server.api("POST", "/v1/workflows", { key: user.key, body: { name } });
    assert.equal(wf.status, 200, wf.text);
    const sub = await server.api("POST", "/v1/subscriptions", {
      key: user.key,
      body: { emitter_id: heard.id, listener_id: wf.body.data.id },
    });
    assert.equal(sub.status, 200, sub.text);
  }
  assert.equal((await emitBig(quiet.configured_props.http.endpoint_url, 1, 3000)).status, 200);
  const alone = (await me(user.key)).daily_stored_bytes_used;
  assert.ok(alone >= 3000 && alone < 3300, `one event stored ${alone} bytes`);
  assert.equal((await emitBig(heard.configured_props.http.endpoint_url, 1, 3000)).status, 200);
  const routed = (await me(user.key)).daily_stored_bytes_used - alone;
  assert.equal(routed, 3 * alone, "the event and its two delivery copies");
});

test("a free account's workflow emits count in its stored bytes, and past the limit get 429", async () => {
  const user = await server.createUser("bytes-workflow");
  const created = await server.api("POST", "/v1/workflows", { key: user.key, body: { name: "runner" } });
  const id = created.body.data.id;
  const emit = () =>
    server.api("POST", `/v1/workflows/${id}/emits`, {
      key: user.key,
      body: { event: { pad: "x".repeat(9000) } },
    });
  assert.equal((await emit()).status, 200);
  const one = (await me(user.key)).daily_stored_bytes_used;
  assert.ok(one >= 9000 && one < 9300, `one workflow emit stored ${one} bytes`);
  assert.equal((await emit()).status, 200);
  assert.equal((await emit()).status, 200, "18,000-odd bytes used: one more may store");
  const refused = await emit();
  assert.equal(refused.status, 429, refused.text);
  assert.equal(refused.body.code, "quota_exceeded");
  assert.ok(Number(refused.headers.get("retry-after")) > 0);
  assert.equal((await me(user.key)).daily_stored_bytes_used, 3 * one);
});

test("past the stored-bytes quota timer ticks wait with one $errors note; a paid account is never limited", async () => {
  clock.set("2026-05-21T08:00:00Z");
  const user = await server.createUser("bytes-timer");
  const s = await deploy(server, { component_code: fixture("ticker.mjs") }, user.key);
  const { scheduler, store, committer } = server.built.services;
  // The day's bytes used up by earlier runs (as the first test's hits did).
  await store.addUsage(user.id, usageDay(clock.now()), { invocations: 0, computeMs: 0, storedBytes: limit });
  for (let i = 0; i < 3; i++) {
    clock.advance(60);
    await scheduler.tick();
  }
  await committer.drain();
  assert.equal((await emitted(server, s.id, user.key)).length, 0, "no tick ran");
  const errors = await events(server, s.id, "$errors", user.key);
  assert.equal(errors.length, 1);
  assert.equal(errors[0].event.error.code, "quota_exceeded");
  assert.match(errors[0].event.error.message, /stored-bytes/);

  const paid = await server.createUser("bytes-paid", "paid");
  const big = await deploy(server, { component_code: fixture("big-events.mjs") }, paid.key);
  for (let i = 0; i < 4; i++)
    assert.equal((await emitBig(big.configured_props.http.endpoint_url, 2, 4000)).status, 200);
  assert.equal((await emitted(server, big.id, paid.key)).length, 8);
  const usage = await store.getUsage(paid.id, usageDay(clock.now()));
  assert.ok(usage.storedBytes > limit, `counted (${usage.storedBytes}) but not limited`);
  const paidMe = await me(paid.key);
  assert.equal(paidMe.daily_stored_bytes_quota, undefined);
});

test("the $errors note of work left after a run counts in its creator's stored bytes", async () => {
  const user = await server.createUser("bytes-late");
  const s = await deploy(server, { component_code: fixture("hostile/late-emit.mjs") }, user.key);
  assert.equal((await hit(s.configured_props.http.endpoint_url, { method: "POST" })).status, 200);
  const deadline = Date.now() + 60_000;
  let notes = await events(server, s.id, "$errors", user.key);
  while (notes.length === 0) {
    assert.ok(Date.now() < deadline, "the late emit's note within 60 s");
    await new Promise((r) => setTimeout(r, 100));
    notes = await events(server, s.id, "$errors", user.key);
  }
  await server.built.services.committer.drain();
  const note = notes[0].event;
  assert.equal(note.error.code, "late_emit");
  const used = (await me(user.key)).daily_stored_bytes_used;
  // The run's one small emit is about 100 bytes with its meta; the note holds its message and context.
  assert.ok(used > 100 + note.error.message.length, `${used} bytes for the run and the note`);
});

test("a free account's replays count their copies in its stored bytes, and are refused once the day's are used up", async () => {
  const user = await server.createUser("bytes-replay");
  const s = await deploy(server, { component_code: fixture("big-events.mjs") }, user.key);
  assert.equal((await emitBig(s.configured_props.http.endpoint_url, 2, 4000)).status, 200);
  const afterRun = (await me(user.key)).daily_stored_bytes_used;
  const perEvent = afterRun / 2;
  // A workflow without a url: its deliveries are recorded as delivered, nothing is sent.
  const wf = await server.api("POST", "/v1/workflows", { key: user.key, body: { name: "replayed-to" } });
  assert.equal(wf.status, 200, wf.text);
  const kept = await events(server, s.id, undefined, user.key);
  const one = await server.api("POST", `/v1/sources/${s.id}/events/${kept[0].id}/replay`, {
    key: user.key,
    body: { listener_id: wf.body.data.id },
  });
  assert.equal(one.status, 200, one.text);
  assert.equal((await me(user.key)).daily_stored_bytes_used, afterRun + perEvent, "one copy counted");
  // The bulk form counts each copy it writes: two more, and the day's 20,000 are then passed.
  const bulk = await server.api("POST", `/v1/sources/${s.id}/events/replay`, {
    key: user.key,
    body: { listener_id: wf.body.data.id },
  });
  assert.equal(bulk.status, 200, bulk.text);
  assert.equal(bulk.body.data.replayed, 2);
  const used = (await me(user.key)).daily_stored_bytes_used;
  assert.equal(used, afterRun + 3 * perEvent);
  assert.ok(used >= limit, `${used} bytes used`);
  for (const path of [
    `/v1/sources/${s.id}/events/${kept[0].id}/replay`,
    `/v1/sources/${s.id}/events/replay`,
  ]) {
    const refused = await server.api("POST", path, { key: user.key, body: { listener_id: wf.body.data.id } });
    assert.equal(refused.status, 429, refused.text);
    assert.equal(refused.body.code, "quota_exceeded");
    assert.ok(Number(refused.headers.get("retry-after")) > 0);
  }
  assert.equal((await me(user.key)).daily_stored_bytes_used, used, "refused replays copy nothing");
});

test("a free account's backfill copies count in its stored bytes; past the day's, a backfill creates nothing", async () => {
  const user = await server.createUser("bytes-backfill");
  const s = await deploy(server, { component_code: fixture("big-events.mjs") }, user.key);
  assert.equal((await emitBig(s.configured_props.http.endpoint_url, 2, 4000)).status, 200);
  const afterRun = (await me(user.key)).daily_stored_bytes_used;
  const workflow = async (name: string) => {
    const wf = await server.api("POST", "/v1/workflows", { key: user.key, body: { name } });
    assert.equal(wf.status, 200, wf.text);
    return wf.body.data.id as string;
  };
  const subscribe = (listener: string, backfill: boolean) =>
    server.api("POST", "/v1/subscriptions", {
      key: user.key,
      body: { emitter_id: s.id, listener_id: listener, backfill },
    });
  const first = await subscribe(await workflow("backfilled-1"), true);
  assert.equal(first.status, 200, first.text);
  assert.equal((await me(user.key)).daily_stored_bytes_used, 2 * afterRun, "two copies counted");
  const second = await subscribe(await workflow("backfilled-2"), true);
  assert.equal(second.status, 200, second.text);
  const used = (await me(user.key)).daily_stored_bytes_used;
  assert.equal(used, 3 * afterRun);
  assert.ok(used >= limit, `${used} bytes used`);
  const late = await workflow("backfilled-3");
  const refused = await subscribe(late, true);
  assert.equal(refused.status, 429, refused.text);
  assert.equal(refused.body.code, "quota_exceeded");
  const subs = await server.api("GET", "/v1/users/me/subscriptions", { key: user.key });
  assert.ok(
    !subs.body.data.some((x: any) => x.listener_id === late),
    "the refused subscription was not created",
  );
  // Without a backfill nothing is copied, and the subscription is made.
  assert.equal((await subscribe(late, false)).status, 200);
  assert.equal((await me(user.key)).daily_stored_bytes_used, used);
});
