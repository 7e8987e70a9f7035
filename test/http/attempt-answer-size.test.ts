/**
 * How much of a receiver's answer an attempt keeps: a success up to 4 KiB (most deliveries succeed, and
 * their answers explain nothing), a failure up to 64 KB (its answer says why), each marked cut beyond.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { DeliveryDispatcher } from "../../src/delivery/dispatcher.ts";
import {
  createWebhook,
  deliveries,
  deploySource,
  emit,
  hookSourceCode,
  scriptedReceivers,
  subscribe,
} from "../delivery/receiver.ts";
import { startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
let dispatcher: DeliveryDispatcher;
before(async () => {
  server = await startServer({ webhookAllowPrivate: true });
  dispatcher = server.built.services.dispatcher;
});
after(() => server.close());

const scripted = scriptedReceivers();

/** The first attempt's stored answer of each delivery of a new webhook the receiver at `url` answers. */
async function answersTo(url: string, events: number): Promise<any[]> {
  const source = await deploySource(server, hookSourceCode);
  const hook = await createWebhook(server, url);
  await subscribe(server, { emitter_id: source.id, listener_id: hook.id });
  for (let n = 0; n < events; n++) await emit(source.endpoint, { n });
  await dispatcher.drain();
  const list = await deliveries(server, hook.id);
  assert.equal(list.length, events);
  return Promise.all(
    list.map(async (d) => {
      const res = await server.api("GET", `/v1/deliveries/${d.id}`);
      assert.equal(res.status, 200, res.text);
      return res.body.data.attempts[0].response;
    }),
  );
}

test("a successful attempt keeps the first 4 KiB of its answer, marked cut beyond", async () => {
  const big = "s".repeat(20_000);
  const r = await scripted((_q, n) =>
    n === 0 ? { status: 200, body: big } : { status: 201, body: "small" },
  );
  const answers = await answersTo(r.url, 2);
  const cut = answers.find((a) => a.status === 200);
  assert.equal(cut.truncated, true);
  assert.equal(cut.body, big.slice(0, 4096));
  const whole = answers.find((a) => a.status === 201);
  assert.equal(whole.truncated, false);
  assert.equal(whole.body, "small");
});

test("a failed attempt keeps its answer up to 64 KB", async () => {
  const big = "f".repeat(20_000);
  const r = await scripted(() => ({ status: 400, body: big }));
  const [answer] = await answersTo(r.url, 1);
  assert.equal(answer.status, 400);
  assert.equal(answer.truncated, false);
  assert.equal(answer.body, big);
});
