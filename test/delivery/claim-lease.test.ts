/**
 * A node's delivery claims stay its own while it works on them: deliveries waiting in memory longer than
 * one lease have it renewed, so another node cannot take them; a node's restart takes back its own.
 */
import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { after, test } from "node:test";
import { startServer } from "../helpers.ts";
import { createWebhook, deliveries, deploySource, emit, hookSourceCode, subscribe } from "./receiver.ts";

/** Answers every request with 200 after `holdMs`. */
async function slowReceiver(holdMs: number): Promise<{ url: string; close: () => Promise<void> }> {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => setTimeout(() => res.end("ok"), holdMs));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

test("deliveries held longer than one lease are renewed, so another node cannot take them", async () => {
  const receiver = await slowReceiver(1500);
  const server = await startServer(
    { webhookAllowPrivate: true },
    { FOUNT_NODE_ID: "node-a" },
    { startDispatcher: false },
  );
  after(async () => {
    await server.close();
    await receiver.close();
  });
  const { dispatcher, store } = server.built.services;
  // A lease of 6.1 s, renewed every 2 s or so (a renewal may come 4 s late on a loaded machine and still
  // be in time); one send at a time, so the eighth waits 10.5 s for the seven before it and is still node
  // A's, in flight or waiting, well after the check below, however slowly this machine runs.
  Object.assign(dispatcher.options, { timeoutMs: 6000, leaseMarginMs: 100, maxPerHost: 1 });
  await dispatcher.start();

  const source = await deploySource(server, hookSourceCode);
  const hook = await createWebhook(server, receiver.url);
  await subscribe(server, { emitter_id: source.id, listener_id: hook.id });
  for (let n = 1; n <= 8; n++) await emit(source.endpoint, { n });

  // Past the first lease (claimed at once, 6.1 s) and before the eighth send ends (about 12 s).
  await new Promise((resolve) => setTimeout(resolve, 6500));
  const other = await store.claimDeliveries({
    nowMs: Date.now(),
    limit: 10,
    perListener: 10,
    claimToken: "node-b",
    exceptListeners: [],
  });
  assert.deepEqual(other, [], "node A's claims were renewed");
  const claimed = (await deliveries(server, hook.id)).filter((d) => d.status === "pending");
  assert.ok(claimed.length > 0, "the last deliveries are still node A's, in flight or waiting");

  // All eight go out once, from node A.
  for (let i = 0; i < 400; i++) {
    const list = await deliveries(server, hook.id);
    if (list.length === 8 && list.every((d) => d.status === "succeeded")) {
      assert.deepEqual(
        list.map((d) => d.attempts),
        [1, 1, 1, 1, 1, 1, 1, 1],
        "no delivery was sent twice",
      );
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  assert.fail("the deliveries did not succeed");
});
