/**
 * Guaranteed delivery over HTTP, against real local receivers: signed webhook deliveries, retries on a
 * fake clock (failures, timeouts, 429 with Retry-After, 410, other 4xx, an exhausted schedule), private
 * addresses, glob and auto-subscription routing, source-to-source chains and their loop guard, backfill,
 * redelivery and tenancy of the deliveries API.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Webhook } from "standardwebhooks";
import type { DeliveryDispatcher } from "../../src/delivery/dispatcher.ts";
import {
  type Answer,
  createWebhook,
  deliveries,
  deploySource,
  emit,
  entries,
  hookSourceCode,
  Receiver,
  relaySourceCode,
  scriptedReceivers,
  subscribe,
} from "../delivery/receiver.ts";
import { FakeClock, startClockServer } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";
import { assertApiError } from "./openapi-walk.ts";

let receiver: Receiver;
before(async () => {
  receiver = await Receiver.start();
});
after(() => receiver.close());

/** A fresh receiver per test that scripts its answers, closed after the test. */
const scripted = scriptedReceivers();

/** A source, and a webhook subscribed to it and made inactive, whose receiver answers 200. */
async function inactiveHook(server: TestServer) {
  const r = await scripted(() => 200);
  const source = await deploySource(server, hookSourceCode);
  const hook = await createWebhook(server, r.url);
  await subscribe(server, { emitter_id: source.id, listener_id: hook.id });
  await server.api("PUT", `/v1/webhooks/${hook.id}`, { body: { active: false } });
  return { r, source, hook };
}

describe("on a live server", () => {
  let server: TestServer;
  let dispatcher: DeliveryDispatcher;
  before(async () => {
    server = await startServer({ webhookAllowPrivate: true });
    dispatcher = server.built.services.dispatcher;
  });
  after(() => server.close());

  test("a webhook gets each emit once: the event as JSON body, Standard Webhooks signature and Fount headers", async () => {
    const r = await scripted(() => 200);
    const source = await deploySource(server, hookSourceCode);
    const hook = await createWebhook(server, r.url);
    await subscribe(server, { emitter_id: source.id, listener_id: hook.id });
    await emit(source.endpoint, { order: 1, text: "héllo" });
    await dispatcher.drain();

    assert.equal(r.requests.length, 1);
    const got = r.requests[0]!;
    assert.deepEqual(new Webhook(hook.secret).verify(got.body, got.headers as Record<string, string>), {
      order: 1,
      text: "héllo",
    });
    assert.equal(got.headers["content-type"], "application/json");
    assert.equal(got.headers["user-agent"], "Fount-Webhooks/1");
    assert.match(String(got.headers["webhook-id"]), /^del_[A-Za-z0-9]+$/);
    assert.ok(Math.abs(Number(got.headers["webhook-timestamp"]) - Date.now() / 1000) < 60);
    assert.equal(got.headers["x-fount-emitter-id"], source.id);
    assert.equal(got.headers["x-fount-event-name"], "default");
    const [stored] = await entries(server, `/v1/sources/${source.id}`);
    assert.equal(got.headers["x-fount-event-id"], stored.id);

    const [d] = await deliveries(server, hook.id);
    assert.equal(d.id, got.headers["webhook-id"]);
    assert.equal(d.status, "succeeded");
    assert.equal(d.attempts, 1);
    assert.equal(d.event_id, stored.id);
    assert.equal(d.emitter_id, source.id);
    assert.equal(d.event_name, "");
    assert.equal(d.last_status_code, 200);
    assert.equal(d.last_error, null);
    assert.equal(d.next_attempt_at, null);
    assert.ok(Number.isInteger(d.duration_ms) && Number.isInteger(d.created_at));
    assert.equal(d.attempt_history.length, 1);
    assert.equal(d.attempt_history[0].outcome, "succeeded");
    assert.equal(d.attempt_history[0].status_code, 200);
    assert.equal(d.attempt_history[0].response, "ok");
    await r.close();
  });

  test("a named channel reaches only subscriptions of that channel; $errors and default stay apart", async () => {
    const source = await deploySource(server, hookSourceCode);
    const [alerts, plain] = [await scripted(() => 200), await scripted(() => 200)];
    const alertsHook = await createWebhook(server, alerts.url);
    const plainHook = await createWebhook(server, plain.url);
    await subscribe(server, { emitter_id: source.id, listener_id: alertsHook.id, event_name: "alerts" });
    await subscribe(server, { emitter_id: source.id, listener_id: plainHook.id, event_name: "default" });
    await emit(source.endpoint, { kind: "alert" }, "alerts");
    await emit(source.endpoint, { kind: "plain" });
    await dispatcher.drain();
    assert.deepEqual(
      alerts.requests.map((q) => q.json),
      [{ kind: "alert" }],
    );
    assert.equal(alerts.requests[0]!.headers["x-fount-event-name"], "alerts");
    assert.deepEqual(
      plain.requests.map((q) => q.json),
      [{ kind: "plain" }],
    );
    await Promise.all([alerts.close(), plain.close()]);
  });

  test("dc_* routes every source of the subscription's owner, and only those", async () => {
    const alice = await server.createUser(`glob-a-${process.pid}`);
    const bob = await server.createUser(`glob-b-${process.pid}`);
    const r = await scripted(() => 200);
    const hook = await createWebhook(server, r.url, alice.key);
    await subscribe(server, { emitter_id: "dc_*", listener_id: hook.id }, alice.key);
    const a1 = await deploySource(server, hookSourceCode, alice.key);
    const a2 = await deploySource(server, hookSourceCode, alice.key);
    const b1 = await deploySource(server, hookSourceCode, bob.key);
    await emit(a1.endpoint, { from: "a1" });
    await emit(a2.endpoint, { from: "a2" });
    await emit(b1.endpoint, { from: "b1" });
    await dispatcher.drain();
    assert.deepEqual(r.requests.map((q) => q.json.from).sort(), ["a1", "a2"]);
    await r.close();
  });

  test("an auto-subscription delivers from sources created after it", async () => {
    const user = await server.createUser(`auto-${process.pid}`);
    const r = await scripted(() => 200);
    const hook = await createWebhook(server, r.url, user.key);
    const earlier = await deploySource(server, hookSourceCode, user.key);
    const res = await server.api("POST", "/v1/auto_subscriptions", {
      key: user.key,
      body: { listener_id: hook.id, event_name: "default" },
    });
    assert.equal(res.status, 200, res.text);
    const later = await deploySource(server, hookSourceCode, user.key);
    await emit(earlier.endpoint, { from: "earlier" });
    await emit(later.endpoint, { from: "later" });
    await dispatcher.drain();
    assert.deepEqual(
      r.requests.map((q) => q.json),
      [{ from: "later" }],
    );
    await r.close();
  });

  test("a listener source runs on each routed event, in order, and its emits route on", async () => {
    const r = await scripted(() => 200);
    const first = await deploySource(server, hookSourceCode);
    const relay = await deploySource(server, relaySourceCode);
    const hook = await createWebhook(server, r.url);
    await subscribe(server, { emitter_id: first.id, listener_id: relay.id });
    await subscribe(server, { emitter_id: relay.id, listener_id: hook.id });
    for (let i = 1; i <= 5; i++) await emit(first.endpoint, { n: i });
    await dispatcher.drain();
    const relayed = (await entries(server, `/v1/sources/${relay.id}`)).reverse();
    assert.deepEqual(
      relayed.map((e) => e.event.relayed.n),
      [1, 2, 3, 4, 5],
      "the listener saw the events in order",
    );
    assert.deepEqual(r.requests.map((q) => q.json.relayed.n).sort(), [1, 2, 3, 4, 5]);
    assert.equal(r.requests[0]!.headers["x-fount-emitter-id"], relay.id);
    await r.close();
  });

  test("a subscription loop between sources stops after 8 hops with a loop_detected error", async () => {
    const a = await deploySource(server, relaySourceCode);
    const b = await deploySource(server, relaySourceCode);
    await subscribe(server, { emitter_id: a.id, listener_id: b.id });
    await subscribe(server, { emitter_id: b.id, listener_id: a.id });
    await emit(a.endpoint, { start: true });
    await dispatcher.drain();
    // a: the HTTP hit and 4 routed runs; b: 4 routed runs; the 9th hop is refused.
    const aEvents = await entries(server, `/v1/sources/${a.id}`);
    const bEvents = await entries(server, `/v1/sources/${b.id}`);
    assert.equal(aEvents.length, 5);
    assert.equal(bEvents.length, 4);
    assert.deepEqual(
      bEvents.map((e) => e.event.hop),
      [8, 6, 4, 2],
    );
    const errors = await entries(server, `/v1/sources/${a.id}`, "$errors");
    assert.equal(errors.length, 1);
    assert.equal(errors[0].event.error.code, "loop_detected");
    assert.equal(errors[0].event.original_context.listener_id, b.id);
    assert.match(errors[0].event.error.message, /at most 8/);
  });

  test("backfill first delivers the emitter's retained events of the channel, oldest first", async () => {
    const r = await scripted(() => 200);
    const source = await deploySource(server, hookSourceCode);
    for (let i = 1; i <= 3; i++) await emit(source.endpoint, { n: i });
    await emit(source.endpoint, { n: "other channel" }, "other");
    const hook = await createWebhook(server, r.url);
    const glob = await server.api("POST", "/v1/subscriptions", {
      body: { emitter_id: "dc_*", listener_id: hook.id, backfill: true },
    });
    assertApiError(glob, { status: 400, code: "invalid_parameter" });
    await subscribe(server, { emitter_id: source.id, listener_id: hook.id, backfill: true });
    await emit(source.endpoint, { n: 4 });
    await dispatcher.drain();
    // Webhook deliveries of one listener go out concurrently (docs/delivery.md), so arrivals may swap;
    // the backfill queues them oldest first, the live one after.
    assert.deepEqual(r.requests.map((q) => q.json.n).sort(), [1, 2, 3, 4]);
    const queued = (await deliveries(server, hook.id)).reverse().map((d) => d.event_id as string);
    const ids = (await server.api("GET", `/v1/sources/${source.id}/event_summaries?limit=10`)).body.data
      .map((e: { id: string }) => e.id)
      .reverse();
    assert.deepEqual(queued, ids, "one delivery per default-channel event, queued oldest first");
    await r.close();
  });

  test("redeliver sends a delivery again with the same webhook-id; redeliver since requeues the failed ones", async () => {
    let failing = true;
    const r = await scripted(() => (failing ? 400 : 200));
    const source = await deploySource(server, hookSourceCode);
    const hook = await createWebhook(server, r.url);
    await subscribe(server, { emitter_id: source.id, listener_id: hook.id });
    const since = Math.floor(Date.now() / 1000);
    await emit(source.endpoint, { n: 1 });
    await emit(source.endpoint, { n: 2 });
    await dispatcher.drain();
    const failed = await deliveries(server, hook.id);
    assert.deepEqual(
      failed.map((d) => d.status),
      ["failed", "failed"],
    );
    failing = false;

    const one = await server.api("POST", `/v1/webhooks/${hook.id}/deliveries/${failed[1].id}/redeliver`);
    assert.equal(one.status, 200, one.text);
    assert.equal(one.body.data.status, "pending");
    await dispatcher.drain();
    assert.equal(r.requests.length, 3);
    assert.equal(r.requests[2]!.headers["webhook-id"], failed[1].id);
    // The two first sends may arrive in either order (one listener's deliveries go out concurrently).
    assert.ok(
      r.requests.slice(0, 2).some((q) => q.headers["webhook-id"] === failed[1].id),
      "the redelivery has the id of an earlier send",
    );

    const later = await server.api("POST", `/v1/webhooks/${hook.id}/redeliver`, {
      body: { since: since + 3600 },
    });
    assert.deepEqual(later.body, { data: { count: 0 } }, "none failed after that time");
    const all = await server.api("POST", `/v1/webhooks/${hook.id}/redeliver`, { body: { since } });
    assert.deepEqual(all.body, { data: { count: 1 } });
    await dispatcher.drain();
    const after = await deliveries(server, hook.id);
    assert.deepEqual(
      after.map((d) => [d.status, d.attempts]),
      [
        ["succeeded", 2],
        ["succeeded", 2],
      ],
    );
    const onlyFailed = await server.api("GET", `/v1/webhooks/${hook.id}/deliveries?status=failed`);
    assert.equal(onlyFailed.body.data.length, 0);
    await r.close();
  });

  test("an inactive webhook's deliveries wait, and go out once it is active again", async () => {
    const { r, source, hook } = await inactiveHook(server);
    await emit(source.endpoint, { n: 1 });
    await dispatcher.drain();
    assert.equal(r.requests.length, 0);
    assert.deepEqual(
      (await deliveries(server, hook.id)).map((d) => [d.status, d.attempts]),
      [["pending", 0]],
    );
    await server.api("PUT", `/v1/webhooks/${hook.id}`, { body: { active: true } });
    await dispatcher.drain();
    assert.equal(r.requests.length, 1);
    await r.close();
  });

  test("a webhook made active again gets its whole parked backlog, made due a batch at a time", async () => {
    const { r, source, hook } = await inactiveHook(server);
    for (let n = 1; n <= 8; n++) await emit(source.endpoint, { n });
    await dispatcher.drain();
    assert.equal(r.requests.length, 0);
    // A PUT that leaves it inactive, or makes an active one active, changes nothing.
    await server.api("PUT", `/v1/webhooks/${hook.id}`, { body: { active: false } });
    const batch = dispatcher.options.unparkBatch;
    dispatcher.options.unparkBatch = 3;
    try {
      await server.api("PUT", `/v1/webhooks/${hook.id}`, { body: { active: true } });
      await dispatcher.drain();
    } finally {
      dispatcher.options.unparkBatch = batch;
    }
    assert.deepEqual(
      r.requests.map((q) => JSON.parse(q.body).n).sort((a, b) => a - b),
      [1, 2, 3, 4, 5, 6, 7, 8],
    );
    await server.api("PUT", `/v1/webhooks/${hook.id}`, { body: { active: true } });
    await dispatcher.drain();
    assert.equal(r.requests.length, 8, "each once");
    await r.close();
  });

  test("a webhook made inactive has its waiting deliveries parked a batch at a time, and sends none of them", async () => {
    // Every first attempt fails: each delivery waits for its retry, due later.
    const r = await scripted(() => 500);
    const source = await deploySource(server, hookSourceCode);
    const hook = await createWebhook(server, r.url);
    await subscribe(server, { emitter_id: source.id, listener_id: hook.id });
    for (let n = 1; n <= 7; n++) await emit(source.endpoint, { n });
    await dispatcher.drain();
    assert.equal(r.requests.length, 7);
    const waiting = await deliveries(server, hook.id);
    assert.ok(
      waiting.every((d) => d.status === "pending" && d.next_attempt_at !== null),
      JSON.stringify(waiting),
    );
    const batch = dispatcher.options.unparkBatch;
    dispatcher.options.unparkBatch = 3;
    try {
      const res = await server.api("PUT", `/v1/webhooks/${hook.id}`, { body: { active: false } });
      assert.equal(res.status, 200, res.text);
      await dispatcher.drain();
    } finally {
      dispatcher.options.unparkBatch = batch;
    }
    assert.deepEqual(
      (await deliveries(server, hook.id)).map((d) => [d.status, d.next_attempt_at]),
      Array.from({ length: 7 }, () => ["pending", null]),
    );
    assert.equal(r.requests.length, 7, "none sent again");
    await r.close();
  });

  test("due deliveries of a webhook made inactive that no one parked (its node stopped first) are parked by the claims that find them", async () => {
    const node = await startServer({ webhookAllowPrivate: true }, {}, { startDispatcher: false });
    try {
      const r = await scripted(() => 200);
      const source = await deploySource(node, hookSourceCode);
      const hook = await createWebhook(node, r.url);
      await subscribe(node, { emitter_id: source.id, listener_id: hook.id });
      for (let n = 1; n <= 3; n++) await emit(source.endpoint, { n });
      // Made inactive as the API does, but the parking that follows never ran.
      const { store, dispatcher: stopped } = node.built.services;
      await store.updateWebhook(hook.id, { active: false, updatedAt: Math.floor(Date.now() / 1000) });
      assert.ok(
        (await deliveries(node, hook.id)).every((d) => d.next_attempt_at !== null),
        "due",
      );
      await stopped.start();
      await stopped.drain();
      assert.equal(r.requests.length, 0);
      assert.deepEqual(
        (await deliveries(node, hook.id)).map((d) => [d.status, d.attempts, d.next_attempt_at]),
        [
          ["pending", 0, null],
          ["pending", 0, null],
          ["pending", 0, null],
        ],
      );
      // And they go out once it is active again.
      await node.api("PUT", `/v1/webhooks/${hook.id}`, { body: { active: true } });
      await stopped.drain();
      assert.equal(r.requests.length, 3);
      await r.close();
    } finally {
      await node.close();
    }
  });

  test("deliveries left parked under a webhook made active (its node stopped before unparking) go out after a start", async () => {
    const node = await startServer({ webhookAllowPrivate: true }, {}, { startDispatcher: false });
    try {
      const { r, source, hook } = await inactiveHook(node);
      for (let n = 1; n <= 3; n++) await emit(source.endpoint, { n });
      // Made active as the API does, but the unparking that follows never ran.
      const { store, dispatcher: stopped } = node.built.services;
      await store.updateWebhook(hook.id, { active: true, updatedAt: Math.floor(Date.now() / 1000) });
      assert.deepEqual(
        (await deliveries(node, hook.id)).map((d) => d.next_attempt_at ?? null),
        [null, null, null],
        "parked",
      );
      await stopped.start();
      await stopped.drain();
      assert.equal(r.requests.length, 3);
      await r.close();
    } finally {
      await node.close();
    }
  });

  test("the deliveries API answers 404 for another tenant's webhook or delivery", async () => {
    const owner = await server.createUser(`dl-owner-${process.pid}`);
    const intruder = await server.createUser(`dl-intruder-${process.pid}`);
    const source = await deploySource(server, hookSourceCode, owner.key);
    const hook = await createWebhook(server, receiver.url, owner.key);
    await subscribe(server, { emitter_id: source.id, listener_id: hook.id }, owner.key);
    await emit(source.endpoint, { n: 1 });
    await dispatcher.drain();
    const [d] = await deliveries(server, hook.id, owner.key);
    const own = await createWebhook(server, receiver.url, intruder.key);
    const tries: Array<[string, string, unknown?]> = [
      ["GET", `/v1/webhooks/${hook.id}/deliveries`],
      ["POST", `/v1/webhooks/${hook.id}/deliveries/${d.id}/redeliver`],
      ["POST", `/v1/webhooks/${own.id}/deliveries/${d.id}/redeliver`],
      ["POST", `/v1/webhooks/${hook.id}/redeliver`, { since: 0 }],
    ];
    for (const [method, path, body] of tries) {
      assertApiError(
        await server.api(method, path, { key: intruder.key, body }),
        { status: 404, code: "not_found" },
        path,
      );
    }
    assert.equal((await deliveries(server, hook.id, owner.key))[0].attempts, 1, "nothing was redelivered");
    const bad = await server.api("POST", `/v1/webhooks/${hook.id}/redeliver`, {
      key: owner.key,
      body: { since: "yesterday" },
    });
    assertApiError(bad, { status: 400 });
  });
});

describe("on a fake clock", () => {
  let server: TestServer;
  let dispatcher: DeliveryDispatcher;
  const clock = new FakeClock(new Date().toISOString());
  before(async () => {
    server = await startClockServer(clock, { env: { FOUNT_WEBHOOK_ALLOW_PRIVATE: "true" } });
    dispatcher = server.built.services.dispatcher;
    dispatcher.options.random = () => 0.5; // no jitter: exact retry times
    dispatcher.options.timeoutMs = 300;
  });
  after(() => server.close());

  async function setUp(answer: Receiver["answer"]) {
    const r = await scripted(answer);
    const source = await deploySource(server, hookSourceCode);
    const hook = await createWebhook(server, r.url);
    await subscribe(server, { emitter_id: source.id, listener_id: hook.id });
    const only = async () => (await deliveries(server, hook.id))[0];
    return { r, source, hook, only };
  }

  const nowS = () => Math.floor(clock.now() / 1000);

  test("a failing receiver is retried on schedule with the same webhook-id until it succeeds", async () => {
    const { r, source, only } = await setUp((_q, n) => (n === 0 ? 500 : 200));
    await emit(source.endpoint, { n: 1 });
    await dispatcher.drain();
    let d = await only();
    assert.equal(d.status, "pending");
    assert.equal(d.attempts, 1);
    assert.equal(d.last_status_code, 500);
    assert.equal(d.last_error, "HTTP 500");
    assert.equal(d.next_attempt_at, nowS() + 5);
    clock.advance(4);
    await dispatcher.drain();
    assert.equal(r.requests.length, 1, "not before its time");
    clock.advance(1);
    await dispatcher.drain();
    assert.equal(r.requests.length, 2);
    assert.equal(r.requests[1]!.headers["webhook-id"], r.requests[0]!.headers["webhook-id"]);
    d = await only();
    assert.equal(d.status, "succeeded");
    assert.deepEqual(
      d.attempt_history.map((a: any) => [a.attempt, a.status_code, a.outcome]),
      [
        [1, 500, "retry"],
        [2, 200, "succeeded"],
      ],
    );
    await r.close();
  });

  test("a receiver that does not answer in time is retried", async () => {
    const { r, source, only } = await setUp((_q, n) => (n === 0 ? "hang" : 200));
    await emit(source.endpoint, { n: 1 });
    await dispatcher.drain();
    let d = await only();
    assert.equal(d.status, "pending");
    assert.equal(d.last_error, "timed out after 300 ms");
    assert.equal(d.last_status_code, null);
    clock.advance(5);
    await dispatcher.drain();
    d = await only();
    assert.equal(d.status, "succeeded");
    assert.equal(r.requests.length, 2);
    await r.close();
  });

  test("429 with Retry-After is retried after the time the receiver asked for", async () => {
    const { r, source, only } = await setUp((_q, n) =>
      n === 0 ? { status: 429, headers: { "retry-after": "20" } } : 200,
    );
    await emit(source.endpoint, { n: 1 });
    await dispatcher.drain();
    assert.equal((await only()).next_attempt_at, nowS() + 20);
    clock.advance(19);
    await dispatcher.drain();
    assert.equal(r.requests.length, 1);
    clock.advance(1);
    await dispatcher.drain();
    assert.equal(r.requests.length, 2);
    assert.equal((await only()).status, "succeeded");
    await r.close();
  });

  test("3xx and 5xx are retried; an HTTP-date Retry-After is honoured", async () => {
    const at = () => new Date(clock.now() + 60_000).toUTCString();
    const { r, source, only } = await setUp((_q, n): Answer => {
      if (n === 0) return { status: 302, headers: { location: "/elsewhere" } };
      if (n === 1) return { status: 503, headers: { "retry-after": at() } };
      return 204;
    });
    await emit(source.endpoint, { n: 1 });
    await dispatcher.drain();
    assert.equal((await only()).last_status_code, 302);
    clock.advance(5);
    await dispatcher.drain();
    const d = await only();
    assert.equal(d.last_status_code, 503);
    assert.equal(d.next_attempt_at, nowS() + 60);
    clock.advance(60);
    await dispatcher.drain();
    assert.equal((await only()).status, "succeeded");
    assert.equal(r.requests.length, 3);
    await r.close();
  });

  test("410 Gone fails the delivery, turns the webhook inactive and records it on the emitter's $errors", async () => {
    let gone = true;
    const { r, source, hook, only } = await setUp(() => (gone ? 410 : 200));
    await emit(source.endpoint, { n: 1 });
    await dispatcher.drain();
    const d = await only();
    assert.equal(d.status, "failed");
    assert.equal(d.last_status_code, 410);
    assert.equal((await server.api("GET", `/v1/webhooks/${hook.id}`)).body.data.active, false);
    const errors = await entries(server, `/v1/sources/${source.id}`, "$errors");
    assert.equal(errors.length, 1);
    assert.equal(errors[0].event.error.code, "webhook_gone");
    assert.deepEqual(errors[0].event.original_event, { n: 1 });
    assert.equal(errors[0].event.original_context.delivery_id, d.id);

    // Inactive: later events wait for it.
    await emit(source.endpoint, { n: 2 });
    clock.advance(3600);
    await dispatcher.drain();
    assert.equal(r.requests.length, 1);
    gone = false;
    await server.api("PUT", `/v1/webhooks/${hook.id}`, { body: { active: true } });
    await dispatcher.drain();
    assert.deepEqual(
      r.requests.map((q) => q.json.n),
      [1, 2],
    );
    await r.close();
  });

  test("a 410 parks the rest of the webhook's waiting deliveries, which then wait for it", async () => {
    // The first event's retry answers 410; every other attempt 500.
    let firstTries = 0;
    const { r, source, hook } = await setUp((q) => (q.json.n === 1 && firstTries++ > 0 ? 410 : 500));
    await emit(source.endpoint, { n: 1 });
    await dispatcher.drain();
    clock.advance(3);
    for (let n = 2; n <= 4; n++) await emit(source.endpoint, { n });
    await dispatcher.drain();
    assert.equal(r.requests.length, 4);
    // The first one's retry is due (5 s after it), the others' not yet (8 s).
    clock.advance(3);
    await dispatcher.drain();
    assert.equal(r.requests.length, 5);
    assert.equal((await server.api("GET", `/v1/webhooks/${hook.id}`)).body.data.active, false);
    // Oldest first: events 1 to 4.
    const list = (await deliveries(server, hook.id)).reverse();
    assert.deepEqual(
      list.map((d) => [d.status, d.next_attempt_at]),
      [["failed", null], ...Array.from({ length: 3 }, () => ["pending", null])],
    );
    clock.advance(3600);
    await dispatcher.drain();
    assert.equal(r.requests.length, 5, "none sent while it is inactive");
    await r.close();
  });

  test("other 4xx fail at once, without retry", async () => {
    const { r, source, only } = await setUp(() => ({ status: 422, body: "bad payload" }));
    await emit(source.endpoint, { n: 1 });
    await dispatcher.drain();
    clock.advance(86_400);
    await dispatcher.drain();
    const d = await only();
    assert.equal(d.status, "failed");
    assert.equal(d.attempts, 1);
    assert.equal(d.attempt_history[0].response, "bad payload");
    const errors = await entries(server, `/v1/sources/${source.id}`, "$errors");
    assert.equal(errors[0].event.error.code, "delivery_rejected");
    assert.equal(errors[0].event.error.status_code, 422);
    assert.equal(r.requests.length, 1);
    await r.close();
  });

  test("a listener source whose run throws is retried, and later events of the subscription wait their turn", async () => {
    const broken = `export default { name: "Listener", version: "1", props: {}, async run() { throw new Error("broken"); } };`;
    const fixed = `export default { name: "Listener", version: "2", props: {}, async run(event) { this.$emit({ got: event }); } };`;
    const source = await deploySource(server, hookSourceCode);
    const listener = await deploySource(server, broken);
    await subscribe(server, { emitter_id: source.id, listener_id: listener.id });
    await emit(source.endpoint, { n: 1 });
    await emit(source.endpoint, { n: 2 });
    await dispatcher.drain();
    const { store } = server.built.services;
    const states = async () =>
      (await store.listDeliveries(listener.id, { limit: 10 })).items
        .reverse()
        .map((d) => [d.status, d.attempts]);
    assert.deepEqual(await states(), [
      ["pending", 1],
      ["pending", 0],
    ]);
    const runErrors = await entries(server, `/v1/sources/${listener.id}`, "$errors");
    assert.equal(runErrors.length, 1, "the failed run is on the listener's own $errors");
    const put = await server.api("PUT", `/v1/sources/${listener.id}`, { body: { component_code: fixed } });
    assert.equal(put.status, 200, put.text);
    clock.advance(5);
    await dispatcher.drain();
    assert.deepEqual(await states(), [
      ["succeeded", 2],
      ["succeeded", 1],
    ]);
    const got = (await entries(server, `/v1/sources/${listener.id}`)).reverse().map((e) => e.event.got.n);
    assert.deepEqual(got, [1, 2]);
  });

  test("a deleted webhook's pending deliveries fail quietly", async () => {
    const { r, source, hook, only } = await setUp(() => 500);
    await emit(source.endpoint, { n: 1 });
    await dispatcher.drain();
    const { id } = await only();
    await server.api("DELETE", `/v1/webhooks/${hook.id}`);
    clock.advance(5);
    await dispatcher.drain();
    const d = await server.built.services.store.getDelivery(id);
    assert.equal(d?.status, "failed");
    assert.equal(d?.lastError, "the webhook no longer exists");
    assert.equal(d?.attempts, 1, "no attempt was made for it");
    assert.deepEqual(await entries(server, `/v1/sources/${source.id}`, "$errors"), []);
    assert.equal(r.requests.length, 1);
    await r.close();
  });

  test("after 8 failed attempts a delivery fails for good; failed deliveries of $errors events are not reported again", async () => {
    const { r, source, only } = await setUp(() => 503);
    const errorsReceiver = await scripted(() => 400);
    const errorsHook = await createWebhook(server, errorsReceiver.url);
    await subscribe(server, { emitter_id: source.id, listener_id: errorsHook.id, event_name: "$errors" });
    await emit(source.endpoint, { n: 1 });
    await dispatcher.drain();
    for (const seconds of [5, 300, 1800, 7200, 18_000, 36_000, 36_000]) {
      assert.equal((await only()).status, "pending");
      clock.advance(seconds);
      await dispatcher.drain();
    }
    const d = await only();
    assert.equal(r.requests.length, 8);
    assert.equal(d.status, "failed");
    assert.equal(d.attempts, 8);
    assert.equal(d.last_error, "HTTP 503 (gave up after 8 attempts)");
    const errors = await entries(server, `/v1/sources/${source.id}`, "$errors");
    assert.equal(errors.length, 1, "only the webhook's failure, not that of the $errors delivery");
    assert.equal(errors[0].event.error.code, "delivery_failed");
    assert.equal(errors[0].event.error.attempts, 8);
    assert.equal(errorsReceiver.requests.length, 1, "the $errors entry was routed (and refused)");
    assert.equal(errorsReceiver.requests[0]!.json.error.code, "delivery_failed");
    await Promise.all([r.close(), errorsReceiver.close()]);
  });
});

describe("private destinations", () => {
  test("are refused by default, before connecting, with a clear error", async () => {
    const server = await startServer();
    try {
      const r = await scripted(() => 200);
      const source = await deploySource(server, hookSourceCode);
      const literal = await createWebhook(server, r.url);
      const named = await createWebhook(server, `http://localhost:${r.port}/hook`);
      await subscribe(server, { emitter_id: source.id, listener_id: literal.id });
      await subscribe(server, { emitter_id: source.id, listener_id: named.id });
      await emit(source.endpoint, { n: 1 });
      await server.built.services.dispatcher.drain();
      assert.equal(r.requests.length, 0, "nothing reached the receiver");
      for (const hook of [literal, named]) {
        const [d] = await deliveries(server, hook.id);
        assert.equal(d.status, "failed");
        assert.match(d.last_error, /refused to connect to .*127\.0\.0\.1|refused to connect to localhost/);
        assert.match(d.last_error, /FOUNT_WEBHOOK_ALLOW_PRIVATE/);
        // A name's address stays unsaid: which private address an internal name has is not the tenant's.
        if (hook === named) assert.doesNotMatch(d.last_error, /127\.0\.0\.1|::1/);
      }
      const errors = await entries(server, `/v1/sources/${source.id}`, "$errors");
      assert.deepEqual(
        errors.map((e) => e.event.error.code),
        ["destination_refused", "destination_refused"],
      );
      await r.close();
    } finally {
      await server.close();
    }
  });

  test("FOUNT_WEBHOOK_ALLOW_HOSTS lets listed hosts through", async () => {
    const server = await startServer({ webhookAllowHosts: ["localhost"] });
    try {
      const r = await scripted(() => 200);
      const source = await deploySource(server, hookSourceCode);
      const named = await createWebhook(server, `http://localhost:${r.port}/hook`);
      const literal = await createWebhook(server, r.url);
      await subscribe(server, { emitter_id: source.id, listener_id: named.id });
      await subscribe(server, { emitter_id: source.id, listener_id: literal.id });
      await emit(source.endpoint, { n: 1 });
      await server.built.services.dispatcher.drain();
      assert.equal(r.requests.length, 1);
      assert.equal((await deliveries(server, named.id))[0].status, "succeeded");
      assert.equal(
        (await deliveries(server, literal.id))[0].status,
        "failed",
        "127.0.0.1 is not on the list",
      );
      await r.close();
    } finally {
      await server.close();
    }
  });

  test("a webhook an admin allowed private addresses reaches loopback; the others stay refused", async () => {
    const server = await startServer();
    try {
      const r = await scripted(() => 200);
      const source = await deploySource(server, hookSourceCode);
      const allowed = await server.api("POST", "/v1/webhooks", {
        body: { url: `http://localhost:${r.port}/hook`, allow_private: true },
      });
      assert.equal(allowed.status, 200, allowed.text);
      const guarded = await createWebhook(server, r.url);
      await subscribe(server, { emitter_id: source.id, listener_id: allowed.body.data.id });
      await subscribe(server, { emitter_id: source.id, listener_id: guarded.id });
      await emit(source.endpoint, { n: 1 });
      await server.built.services.dispatcher.drain();
      assert.equal(r.requests.length, 1, "only the allowed webhook's delivery arrived");
      assert.equal((await deliveries(server, allowed.body.data.id))[0].status, "succeeded");
      const [refused] = await deliveries(server, guarded.id);
      assert.equal(refused.status, "failed");
      assert.match(refused.last_error, /refused to connect to .*127\.0\.0\.1/);
      await r.close();
    } finally {
      await server.close();
    }
  });
});
