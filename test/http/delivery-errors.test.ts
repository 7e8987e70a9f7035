/**
 * What a failed delivery leaves in the store must be text both drivers keep and read back: a listener
 * source's run error holding U+0000 (PostgreSQL's text refuses it) or cut inside an emoji (half a pair,
 * which PostgreSQL's jsonb refuses in the first attempt kept as JSON) is stored with U+FFFD in its place.
 * And a result the store refuses to record all the same is an attempt that failed, tried again on the
 * retry schedule, never claimed again at once. On a fake clock, so retries come due only when the test
 * moves it; on both drivers (test/http-postgres/delivery-errors.test.ts).
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { DeliveryDispatcher } from "../../src/delivery/dispatcher.ts";
import type { Storage, StorageOps } from "../../src/storage/port.ts";
import { deploySource, emit, entries, hookSourceCode, subscribe } from "../delivery/receiver.ts";
import { FakeClock, nextBusEvent, startClockServer } from "../fixtures/components/fixtures.ts";
import type { TestServer } from "../helpers.ts";

let server: TestServer;
let dispatcher: DeliveryDispatcher;
const clock = new FakeClock(new Date().toISOString());
before(async () => {
  server = await startClockServer(clock);
  dispatcher = server.built.services.dispatcher;
  dispatcher.options.random = () => 0.5; // no jitter: exact retry times
});
after(() => server.close());

/** A source that emits what it is sent, and a listener source subscribed to it that runs `run`. */
async function listening(run: string) {
  const source = await deploySource(server, hookSourceCode);
  const listener = await deploySource(
    server,
    `export default { name: "Listener", version: "1", props: {}, async run(event) { ${run} } };`,
  );
  await subscribe(server, { emitter_id: source.id, listener_id: listener.id });
  return { source, listener };
}

/** The deliveries of the emitter's newest event, through the API (the list reads each first attempt). */
async function eventDeliveries(emitterId: string): Promise<any[]> {
  const list = await server.api("GET", `/v1/sources/${emitterId}/events`);
  assert.equal(list.status, 200, list.text);
  const res = await server.api("GET", `/v1/sources/${emitterId}/events/${list.body.data[0].id}/deliveries`);
  assert.equal(res.status, 200, res.text);
  return res.body.data;
}

test("a run error cut inside an emoji, or holding half a pair, is stored well-formed, and the event's deliveries list answers", async () => {
  // The executor keeps 8,192 UTF-16 units of an error's message: the emoji's first half was the last.
  const { source } = await listening('throw new Error("x".repeat(8191) + "\\u{1F600}");');
  await emit(source.endpoint, { n: 1 });
  await dispatcher.drain();
  const [cut] = await eventDeliveries(source.id);
  assert.deepEqual([cut.status, cut.attempts], ["pending", 1]);
  assert.equal(cut.last_error, `component_error: ${"x".repeat(8191)}`);
  assert.equal(cut.attempt_history[0].error, cut.last_error);

  // Thrown so by the component: U+FFFD stands in for it.
  const half = await listening('throw new Error("a\\ud800b");');
  await emit(half.source.endpoint, { n: 2 });
  await dispatcher.drain();
  const [d] = await eventDeliveries(half.source.id);
  assert.deepEqual([d.status, d.attempts], ["pending", 1]);
  assert.equal(d.last_error, "component_error: a\uFFFDb");
  assert.equal(d.attempt_history[0].error, d.last_error);
});

test("a run error holding U+0000 is stored with U+FFFD, and the delivery waits for its retry", async () => {
  const { source, listener } = await listening('throw new Error("x\\u0000y");');
  // Settled once: its result was written (on PostgreSQL the write failed, and the delivery was claimed
  // and run again at once, without end).
  const settled = nextBusEvent<{ listenerId: string }>(
    (l) => server.built.services.bus.on("delivery.settled", l),
    (s) => s.listenerId === listener.id,
    15_000,
  );
  await emit(source.endpoint, { n: 1 });
  await settled;
  await dispatcher.drain();
  const [d] = await eventDeliveries(source.id);
  assert.equal(d.status, "pending");
  assert.equal(d.attempts, 1);
  assert.equal(d.last_error, "component_error: x\uFFFDy");
  const runErrors = await entries(server, `/v1/sources/${listener.id}`, "$errors");
  assert.equal(runErrors.length, 1, "the listener ran once");
  assert.equal(runErrors[0].event.error.message, "x\u0000y", "its own $errors keeps the error as thrown");
});

test("a result the store refuses to record is a failed attempt, retried on the schedule, not claimed again at once", async () => {
  const { source, listener } = await listening("this.$emit({ ran: event });");
  const store = server.built.services.store;
  const transaction = store.transaction.bind(store);
  let refused = 0;
  // While patched, the store refuses to record a delivery as succeeded (as it would a value it cannot
  // hold), and writes anything else.
  const refusing: Storage["transaction"] = (fn) =>
    transaction((tx) => {
      const settleDelivery: StorageOps["settleDelivery"] = (id, patch, attempt) => {
        if (patch.status !== "succeeded") return tx.settleDelivery(id, patch, attempt);
        refused++;
        return Promise.reject(new Error("injected: the store refused the result"));
      };
      return fn(
        new Proxy(tx, { get: (t, k) => (k === "settleDelivery" ? settleDelivery : Reflect.get(t, k)) }),
      );
    });
  (store as { transaction: Storage["transaction"] }).transaction = refusing;
  try {
    await emit(source.endpoint, { n: 1 });
    await dispatcher.drain();
  } finally {
    (store as { transaction: Storage["transaction"] }).transaction = transaction;
  }
  assert.ok(refused > 0, "the result was refused");
  const [d] = (await store.listDeliveries(listener.id, { limit: 10 })).items;
  assert.equal(d?.status, "pending");
  assert.equal(d?.attempts, 1, "the attempt counts");
  assert.equal(d?.claimedBy, null, "not left claimed");
  assert.match(d?.lastError ?? "", /^the attempt's result could not be recorded \(injected/);
  assert.equal(d?.nextAttemptMs, clock.now() + 5_000, "due again on the retry schedule");
  assert.equal((await entries(server, `/v1/sources/${listener.id}`)).length, 1, "the listener ran once");

  // Once the store records results again, the retry succeeds.
  clock.advance(5);
  await dispatcher.drain();
  const [again] = (await store.listDeliveries(listener.id, { limit: 10 })).items;
  assert.deepEqual([again?.status, again?.attempts], ["succeeded", 2]);
  assert.equal((await entries(server, `/v1/sources/${listener.id}`)).length, 2);
});
