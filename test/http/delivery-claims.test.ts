/**
 * How deliveries are taken: a webhook delivery that its node can send at once is written claimed by the
 * node as the event is routed and sent once the emit committed, without a claim; beyond half of a
 * destination's hold, deliveries wait in the due queue for the claims; a backlog larger than one claim
 * may take drains without waiting for the dispatcher's poll; a reactivated webhook's deliveries go out at
 * once; the deliveries of one commit share one read of their webhook, and a changed URL is used by every
 * delivery started after the change; one whose commit lands after the dispatcher stopped is released
 * for any node. Claims and webhook reads are counted by wrapping the store's `claimDeliveries` and
 * `getWebhook`, which the dispatcher and the deliverer call.
 */
import assert from "node:assert/strict";
import { after, afterEach, before, describe, test } from "node:test";
import type { DeliveryDispatcher } from "../../src/delivery/dispatcher.ts";
import { defaultDispatcherOptions } from "../../src/delivery/options.ts";
import type { Delivery } from "../../src/domain/types.ts";
import type { Storage } from "../../src/storage/port.ts";
import {
  createWebhook,
  deploySource,
  emit,
  Gate,
  hookSourceCode,
  Receiver,
  subscribe,
} from "../delivery/receiver.ts";
import { startServer, type TestServer } from "../helpers.ts";

/** Waits until `check` holds (polling every 20 ms), failing after `timeoutMs` with `what` (then). */
async function until(
  what: string | (() => string),
  check: () => boolean | Promise<boolean>,
  timeoutMs = 30_000,
) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline)
      throw new Error(`not within ${timeoutMs} ms: ${typeof what === "string" ? what : what()}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

let server: TestServer;
let dispatcher: DeliveryDispatcher;
let store: Storage;
/** Deliveries the dispatcher's claims returned since the server started. */
let claimed: string[] = [];
/** How many deliveries each claim that returned some took, in order. */
let claimSizes: number[] = [];
/** Reads of each webhook since the server started. */
const webhookReads = new Map<string, number>();
const closers: Array<() => Promise<void>> = [];

before(async () => {
  server = await startServer({ webhookAllowPrivate: true });
  dispatcher = server.built.services.dispatcher;
  store = server.built.services.store;
  const claim = store.claimDeliveries.bind(store);
  store.claimDeliveries = async (c) => {
    const rows = await claim(c);
    claimed.push(...rows.map((d) => d.id));
    if (rows.length > 0) claimSizes.push(rows.length);
    return rows;
  };
  const getWebhook = store.getWebhook.bind(store);
  store.getWebhook = (id) => {
    webhookReads.set(id, (webhookReads.get(id) ?? 0) + 1);
    return getWebhook(id);
  };
});
after(() => server.close());
afterEach(async () => {
  Object.assign(dispatcher.options, defaultDispatcherOptions);
  await Promise.all(closers.splice(0).map((close) => close()));
});

/** A source subscribed to a new webhook at `url`. */
async function wired(url: string): Promise<{ endpoint: string; hookId: string }> {
  const source = await deploySource(server, hookSourceCode);
  const hook = await createWebhook(server, url);
  await subscribe(server, { emitter_id: source.id, listener_id: hook.id });
  return { endpoint: source.endpoint, hookId: hook.id };
}

async function stored(hookId: string): Promise<Delivery[]> {
  return (await store.listDeliveries(hookId, { limit: 100 })).items;
}

describe("deliveries claimed as they are routed", () => {
  test("a delivery its node can send at once is stored claimed by the node and sent without a claim", async () => {
    dispatcher.options.timeoutMs = 300_000;
    const gate = await Gate.start();
    closers.push(() => gate.close());
    const { endpoint, hookId } = await wired(gate.url);
    claimed = [];
    await emit(endpoint, { n: 1 });
    await until("the delivery reaches the receiver", () => gate.waiting === 1);
    const [d] = await stored(hookId);
    assert.equal(d?.status, "pending");
    assert.equal(d?.claimedBy, server.built.services.config.nodeId);
    gate.open();
    await until("the delivery succeeds", async () => (await stored(hookId))[0]?.status === "succeeded");
    assert.equal((await stored(hookId))[0]?.claimedBy, null);
    assert.deepEqual(claimed, [], "no claim took it");
    assert.deepEqual(
      gate.bodies.map((b) => JSON.parse(b)),
      [{ n: 1 }],
    );
  });

  test("beyond half of a destination's hold, deliveries wait for the claims, and every one arrives once", async () => {
    // Held at the gate for as long as the test takes, not timed out and retried.
    Object.assign(dispatcher.options, { maxPerHost: 2, maxHeldPerHost: 4, timeoutMs: 300_000 });
    const gate = await Gate.start();
    closers.push(() => gate.close());
    const { endpoint, hookId } = await wired(gate.url);
    claimed = [];
    for (let n = 1; n <= 6; n++) await emit(endpoint, { n });
    // Two are being sent (claimed at routing), two more were claimed to wait for a slot (the hold is
    // 4), and two wait unclaimed in the store.
    await until("two deliveries at the receiver", () => gate.waiting === 2);
    await until(
      () => `two deliveries claimed (${claimed.length}; ${gate.waiting} at the receiver)`,
      () => claimed.length === 2,
    );
    const rows = await stored(hookId);
    assert.equal(rows.length, 6);
    assert.equal(rows.filter((d) => d.claimedBy === null).length, 2, "two left to the claims");
    const first = rows.filter((d) => (d.event as { n: number }).n <= 2);
    assert.equal(first.length, 2);
    assert.ok(
      first.every((d) => !claimed.includes(d.id)),
      "the first two were claimed as they were routed",
    );
    gate.open();
    await until("all six succeed", async () => (await stored(hookId)).every((d) => d.status === "succeeded"));
    assert.equal(claimed.length, 4);
    assert.deepEqual(gate.bodies.map((b) => JSON.parse(b).n).sort(), [1, 2, 3, 4, 5, 6]);
  });

  test("a backlog larger than one claim may take drains without waiting for the poll", async () => {
    // One claim takes at most 8 of a destination, and 8 in flight fill every slot: each later claim
    // must come from a slot freeing up, since the poll is ten minutes away.
    Object.assign(dispatcher.options, {
      pollMs: 600_000,
      maxConcurrency: 8,
      maxPerHost: 8,
      maxHeldPerHost: 8,
    });
    const receiver = await Receiver.start();
    closers.push(() => receiver.close());
    const { endpoint, hookId } = await wired(receiver.url);
    const put = await server.api("PUT", `/v1/webhooks/${hookId}`, { body: { active: false } });
    assert.equal(put.status, 200);
    for (let n = 1; n <= 40; n++) await emit(endpoint, { n });
    assert.equal((await stored(hookId)).filter((d) => d.status === "pending").length, 40);
    // Reactivation wakes the dispatcher: the backlog does not wait for the poll either.
    await server.api("PUT", `/v1/webhooks/${hookId}`, { body: { active: true } });
    await until("all 40 delivered", () => receiver.requests.length >= 40);
    await until("all 40 settled", async () => (await stored(hookId)).every((d) => d.status === "succeeded"));
    assert.equal(new Set(receiver.requests.map((r) => r.headers["webhook-id"])).size, 40);
  });

  test("a draining backlog is claimed in batches of half the hold, not one claim per freed slot", async () => {
    // Two in flight, 32 held: a delivery that ends frees one slot. Claiming at every freed slot took one
    // or two deliveries a claim; a claim now waits until half the hold (16) is free.
    Object.assign(dispatcher.options, {
      pollMs: 600_000,
      maxConcurrency: 2,
      maxPerHost: 2,
      maxHeldPerHost: 32,
    });
    const receiver = await Receiver.start();
    closers.push(() => receiver.close());
    const { endpoint, hookId } = await wired(receiver.url);
    const put = await server.api("PUT", `/v1/webhooks/${hookId}`, { body: { active: false } });
    assert.equal(put.status, 200);
    for (let n = 1; n <= 80; n++) await emit(endpoint, { n });
    claimSizes = [];
    await server.api("PUT", `/v1/webhooks/${hookId}`, { body: { active: true } });
    await until("all 80 settled", async () => (await stored(hookId)).every((d) => d.status === "succeeded"));
    assert.equal(new Set(receiver.requests.map((r) => r.headers["webhook-id"])).size, 80);
    // The first claim fills the hold (32); each later batch of 16 or more may be followed by one claim
    // that takes what ended meanwhile (at most the 2 in flight), so about 8 claims; one per freed slot
    // would have been 25 or more.
    assert.equal(
      claimSizes.reduce((a, b) => a + b, 0),
      80,
    );
    assert.ok(claimSizes.length <= 12, `claims took ${claimSizes.join(", ")}`);
  });

  test("the deliveries of one commit share one read of their webhook; a new URL is used from the next delivery", async () => {
    const before = await Receiver.start();
    const moved = await Receiver.start();
    closers.push(
      () => before.close(),
      () => moved.close(),
    );
    // One run emits five events: one commit, five deliveries started together.
    const source = await deploySource(
      server,
      `export default {
        name: "Five",
        version: "0.0.1",
        props: { http: "$.interface.http" },
        async run(event) {
          for (let i = 1; i <= 5; i++) this.$emit({ batch: event.body.batch, i });
        },
      };`,
    );
    const hook = await createWebhook(server, before.url);
    await subscribe(server, { emitter_id: source.id, listener_id: hook.id });
    webhookReads.delete(hook.id);
    await emit(source.endpoint, { batch: 1 });
    await dispatcher.drain();
    assert.equal(before.requests.length, 5);
    assert.equal(webhookReads.get(hook.id), 1, "one read for the five deliveries of one commit");

    const put = await server.api("PUT", `/v1/webhooks/${hook.id}`, { body: { url: moved.url } });
    assert.equal(put.status, 200);
    webhookReads.delete(hook.id); // the PUT read it too
    await emit(source.endpoint, { batch: 2 });
    await dispatcher.drain();
    assert.equal(before.requests.length, 5, "nothing more to the old URL");
    // Sent concurrently: their order is not promised.
    assert.deepEqual(
      moved.requests.map((r) => r.json).sort((a, b) => a.i - b.i),
      [1, 2, 3, 4, 5].map((i) => ({ batch: 2, i })),
    );
    assert.equal(webhookReads.get(hook.id), 1);
  });
});

test("a delivery claimed at routing whose commit lands after the dispatcher stopped is released for any node", async () => {
  const own = await startServer({ webhookAllowPrivate: true });
  try {
    const { committer, recorder, bus, dispatcher: stopped, store: ownStore, config } = own.built.services;
    const receiver = await Receiver.start();
    closers.push(() => receiver.close());
    const source = await deploySource(own, hookSourceCode);
    const hook = await createWebhook(own, receiver.url);
    await subscribe(own, { emitter_id: source.id, listener_id: hook.id });
    let stopping: Promise<void> | undefined;
    await committer.submit(
      async (tx) => {
        const event = await recorder.store(tx, {
          emitterId: source.id,
          channel: "",
          event: { n: 1 },
          nowMs: Date.now(),
        });
        // Routed and claimed by this node; the dispatcher stops before the transaction commits.
        stopping = stopped.stop();
        return event;
      },
      (event) => bus.emit("event.stored", event),
    );
    await stopping;
    const row = async () => (await ownStore.listDeliveries(hook.id, { limit: 10 })).items;
    assert.equal((await row())[0]?.claimedBy, config.nodeId, "claimed as it was routed, not sent");
    await stopped.releaseLeftovers();
    assert.deepEqual(
      (await row()).map((d) => [d.status, d.claimedBy]),
      [["pending", null]],
    );
    assert.equal(receiver.requests.length, 0);
  } finally {
    await own.close();
  }
});
