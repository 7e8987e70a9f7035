/**
 * One owner's deliveries cannot take every send slot or every held place of a node: an owner whose
 * receivers never answer keeps at most `maxPerOwner` attempts in flight and `maxHeldPerOwner` claimed,
 * another owner's delivery still goes out at once, and once the receivers answer every one of the first
 * owner's deliveries arrives, once.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { DeliveryDispatcher } from "../../src/delivery/dispatcher.ts";
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

/** Waits until `check` holds (polling every 20 ms), failing after `timeoutMs` with `what`. */
async function until(what: () => string, check: () => boolean | Promise<boolean>, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${what()}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

let server: TestServer;
let dispatcher: DeliveryDispatcher;
before(async () => {
  server = await startServer({ webhookAllowPrivate: true });
  dispatcher = server.built.services.dispatcher;
});
after(() => server.close());

test("an owner whose receivers never answer leaves slots and claims for another owner, and each of its deliveries still arrives once", async () => {
  // A small node: four destinations of one owner could fill its 8 send slots (4 per host) and its 16
  // held places; one owner may have 4 in flight and 8 held. Held at the gates for as long as the test
  // takes, not timed out and retried.
  Object.assign(dispatcher.options, {
    maxConcurrency: 8,
    maxPerHost: 4,
    maxHeldPerHost: 8,
    maxHeld: 16,
    maxPerOwner: 4,
    maxHeldPerOwner: 8,
    timeoutMs: 300_000,
  });
  const gates = await Promise.all([1, 2, 3, 4].map(() => Gate.start()));
  const fast = await Receiver.start();
  try {
    const a = await server.createUser("busy-owner");
    const b = await server.createUser("other-owner");
    const aSource = await deploySource(server, hookSourceCode, a.key);
    for (const gate of gates) {
      const hook = await createWebhook(server, gate.url, a.key);
      await subscribe(server, { emitter_id: aSource.id, listener_id: hook.id }, a.key);
    }
    const bSource = await deploySource(server, hookSourceCode, b.key);
    const bHook = await createWebhook(server, fast.url, b.key);
    await subscribe(server, { emitter_id: bSource.id, listener_id: bHook.id }, b.key);

    const events = 6;
    for (let n = 0; n < events; n++) await emit(aSource.endpoint, { n });
    const atGates = () => gates.reduce((sum, g) => sum + g.waiting, 0);
    await until(
      () => `the busy owner's sends fill its share (${atGates()} at the gates)`,
      () => atGates() >= 4,
    );
    await emit(bSource.endpoint, { other: true });
    await until(
      () => `the other owner's delivery arrives (${atGates()} of the busy owner's at the gates)`,
      () => fast.requests.length === 1,
    );
    assert.deepEqual(fast.requests[0]?.json, { other: true });
    assert.equal(atGates(), 4, "the busy owner has no more than its 4 in flight");

    for (const gate of gates) gate.open();
    await until(
      () => `every delivery of the busy owner arrives (${gates.map((g) => g.bodies.length).join(", ")})`,
      () => gates.every((g) => g.bodies.length >= events),
    );
    await dispatcher.drain();
    for (const gate of gates)
      assert.deepEqual(
        gate.bodies.map((body) => JSON.parse(body).n).sort(),
        [0, 1, 2, 3, 4, 5],
        "each event once at each destination",
      );
  } finally {
    await Promise.all([...gates.map((g) => g.close()), fast.close()]);
  }
});
