/**
 * PostgreSQL lost while the server runs, and given back: the server reaches its database through a TCP
 * proxy that the test cuts and restores. While it is cut the node is live but not ready, and requests
 * get 503 `store_unavailable` with `Retry-After` instead of hanging; once restored the node serves again
 * by itself, with nothing acknowledged lost, timers firing and held deliveries delivered.
 */
import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { Writable } from "node:stream";
import { after, before, test } from "node:test";
import type { Storage } from "../../src/storage/port.ts";
import { openPostgresStorage } from "../../src/storage/postgres/driver.ts";
import { createWebhook, deliveries, entries, hookSourceCode, subscribe } from "../delivery/receiver.ts";
import { fixture } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";
import { dropSchema, freshSchema, testPgUrl } from "../pg-schemas.ts";
import { TcpProxy } from "../tcp-proxy.ts";

/** The store timeout of these servers: short, so that a dropping network is noticed soon. */
const storeTimeoutMs = 1500;
/** Generous bounds for what must happen "within seconds" on a loaded machine. */
const answerBoundMs = 15_000;
const recoveryBoundMs = 60_000;

const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown) => unhandled.push(reason);
before(() => process.on("unhandledRejection", onUnhandled));
after(() => process.off("unhandledRejection", onUnhandled));

/** Polls `check` until it returns a value other than undefined, or fails after `boundMs`. */
async function eventually<T>(what: string, boundMs: number, check: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + boundMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${boundMs} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** A server whose store goes through a proxy; its pino lines are kept as parsed objects. */
async function serverThroughProxy(): Promise<{
  server: TestServer;
  proxy: TcpProxy;
  logs: Array<Record<string, any>>;
  close: () => Promise<void>;
}> {
  const target = new URL(testPgUrl);
  const proxy = await TcpProxy.start({ host: target.hostname, port: Number(target.port || 5432) });
  const viaProxy = new URL(testPgUrl);
  viaProxy.port = String(proxy.port);
  const schema = freshSchema("fount_dbloss");
  let store: Storage | undefined;
  try {
    store = await openPostgresStorage({
      url: viaProxy.toString(),
      schema,
      poolSize: 4,
      timeoutMs: storeTimeoutMs,
    });
    const logs: Array<Record<string, any>> = [];
    const stream = new Writable({
      write(chunk, _encoding, done) {
        for (const line of chunk.toString("utf8").split("\n")) if (line) logs.push(JSON.parse(line));
        done();
      },
    });
    const server = await startServer(
      {},
      { FOUNT_WEBHOOK_ALLOW_PRIVATE: "true" },
      { store, logger: { level: "debug", stream } },
    );
    return {
      server,
      proxy,
      logs,
      close: async () => {
        proxy.restore();
        await server.close();
        await proxy.close();
        await dropSchema(schema);
      },
    };
  } catch (err) {
    await store?.close().catch(() => undefined);
    await proxy.close();
    await dropSchema(schema).catch(() => undefined);
    throw err;
  }
}

/** A webhook receiver that holds every request until `release()`, then answers later ones at once. */
async function holdingReceiver() {
  const held: http.ServerResponse[] = [];
  const bodies: Array<{ n: number; heldAt: boolean }> = [];
  let holding = true;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      bodies.push({ n: JSON.parse(Buffer.concat(chunks).toString("utf8")).n, heldAt: holding });
      if (holding) held.push(res);
      else res.end("ok");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    bodies,
    held,
    release: () => {
      holding = false;
      for (const res of held.splice(0)) res.end("ok");
    },
    close: async () => {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}

async function hit(endpoint: string, body: unknown): Promise<Response> {
  return fetch(endpoint, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

test("a node whose PostgreSQL goes away answers 503 with Retry-After, stays live, and recovers by itself", async (t) => {
  const { server, proxy, logs, close } = await serverThroughProxy();
  const receiver = await holdingReceiver();
  try {
    // A webhook source whose deliveries the receiver holds, and a timer source ticking every second.
    const hook = (await server.api("POST", "/v1/sources", { body: { component_code: hookSourceCode } })).body
      .data;
    const webhook = await createWebhook(server, receiver.url);
    await subscribe(server, { emitter_id: hook.id, listener_id: webhook.id });
    const ticker = await server.api("POST", "/v1/sources", {
      body: { component_code: fixture("ticker.mjs"), configured_props: { timer: { intervalSeconds: 1 } } },
    });
    assert.equal(ticker.status, 200, ticker.text);

    const acknowledged = 5;
    for (let n = 1; n <= acknowledged; n++) {
      const res = await hit(hook.endpoint_url, { n });
      assert.equal(res.status, 200, await res.text());
    }
    // Every delivery is claimed and in flight (held by the receiver) when the database goes away.
    await eventually("deliveries held", answerBoundMs, async () =>
      receiver.held.length === acknowledged ? true : undefined,
    );
    assert.equal((await server.api("GET", "/readyz", { key: null })).status, 200);

    proxy.cut("reset");

    const ready = await server.api("GET", "/readyz", { key: null });
    assert.equal(ready.status, 503);
    assert.match(ready.body.status, /^storage unreachable: /);
    assert.equal((await server.api("GET", "/healthz", { key: null })).status, 200);

    // A source endpoint and an API route: 503 with Retry-After and the catalogue body, not a hang.
    const started = Date.now();
    const endpointRes = await hit(hook.endpoint_url, { n: 99 });
    assert.equal(endpointRes.status, 503);
    assert.equal(endpointRes.headers.get("retry-after"), "5");
    assert.equal(((await endpointRes.json()) as { code: string }).code, "store_unavailable");
    const apiRes = await server.api("GET", `/v1/sources/${hook.id}`);
    assert.equal(apiRes.status, 503);
    assert.equal(apiRes.headers.get("retry-after"), "5");
    assert.equal(apiRes.body.code, "store_unavailable");
    const refusedMs = Date.now() - started;
    assert.ok(refusedMs < answerBoundMs, "the 503s came within the bound");
    t.diagnostic(`reset: endpoint and API route refused with 503 in ${refusedMs} ms`);
    const metrics = await server.api("GET", "/metrics", { key: null });
    assert.equal(metrics.status, 200);
    assert.match(metrics.text, /^fount_store_up\{[^}]*\} 0$/m);

    // The held deliveries get their answers while their results cannot be written.
    receiver.release();
    await eventually("deliveries left claimed", answerBoundMs, async () =>
      logs.filter((l) => l.msg === "delivery left claimed: the store is unavailable").length === acknowledged
        ? true
        : undefined,
    );

    proxy.restore();
    const restoredAt = Date.now();
    await eventually("/readyz 200 again", recoveryBoundMs, async () =>
      (await server.api("GET", "/readyz", { key: null })).status === 200 ? true : undefined,
    );
    t.diagnostic(`reset: ready again ${Date.now() - restoredAt} ms after the restore`);
    const again = await hit(hook.endpoint_url, { n: 100 });
    assert.equal(again.status, 200, await again.text());

    // Every acknowledged event is stored; the one refused with 503 is not.
    const stored = (await entries(server, `/v1/sources/${hook.id}`))
      .map((e) => e.event.n)
      .sort((a, b) => a - b);
    assert.deepEqual(stored, [1, 2, 3, 4, 5, 100]);

    // The timer fires again after the outage.
    await eventually("a tick after the restore", recoveryBoundMs, async () => {
      const ticks = await entries(server, `/v1/sources/${ticker.body.data.id}`);
      return ticks.some((t) => t.event.event.timestamp * 1000 >= restoredAt - 1000) ? true : undefined;
    });

    // The deliveries claimed before the loss are delivered after it.
    const delivered = await eventually("deliveries settled", recoveryBoundMs, async () => {
      const list = await deliveries(server, webhook.id);
      return list.length === acknowledged + 1 && list.every((d) => d.status === "succeeded")
        ? list
        : undefined;
    });
    assert.equal(delivered.length, acknowledged + 1);
    const after = receiver.bodies.filter((b) => !b.heldAt).map((b) => b.n);
    for (let n = 1; n <= acknowledged; n++) assert.ok(after.includes(n), `event ${n} was delivered again`);

    // Logged once each way, at error and at warn; nothing else at error, and no unhandled rejection.
    const errors = logs.filter((l) => l.level >= 50);
    assert.deepEqual(
      errors.map((l) => l.msg),
      [errors[0]?.msg],
    );
    assert.match(errors[0]!.msg, /^The database is unreachable \(.+\): answering 503/);
    assert.equal(logs.filter((l) => /^The database answers again/.test(l.msg)).length, 1);
    assert.deepEqual(unhandled, []);
  } finally {
    await receiver.close();
    await close();
  }
});

test("a database that stops answering (packets dropped) gets 503 within the store timeout, not a hang", async (t) => {
  const { server, proxy, close } = await serverThroughProxy();
  try {
    const hook = (await server.api("POST", "/v1/sources", { body: { component_code: hookSourceCode } })).body
      .data;
    assert.equal((await hit(hook.endpoint_url, { n: 1 })).status, 200);

    proxy.cut("drop");
    const started = Date.now();
    const res = await hit(hook.endpoint_url, { n: 2 });
    const waited = Date.now() - started;
    assert.equal(res.status, 503, await res.text());
    assert.equal(res.headers.get("retry-after"), "5");
    assert.ok(waited < answerBoundMs, `answered after ${waited} ms`);
    t.diagnostic(`drop: endpoint refused with 503 in ${waited} ms (store timeout ${storeTimeoutMs} ms)`);
    // Once a probe confirmed the loss, requests are refused without waiting for the timeout again.
    await eventually("/readyz 503", answerBoundMs, async () =>
      (await server.api("GET", "/readyz", { key: null })).status === 503 ? true : undefined,
    );
    assert.equal((await server.api("GET", "/healthz", { key: null })).status, 200);

    const refusedAt = Date.now();
    const fast = await hit(hook.endpoint_url, { n: 2 });
    assert.equal(fast.status, 503);
    t.diagnostic(`drop: refused again in ${Date.now() - refusedAt} ms once the loss was confirmed`);

    proxy.restore();
    const restoredAt = Date.now();
    await eventually("/readyz 200 again", recoveryBoundMs, async () =>
      (await server.api("GET", "/readyz", { key: null })).status === 200 ? true : undefined,
    );
    t.diagnostic(`drop: ready again ${Date.now() - restoredAt} ms after the restore`);
    assert.equal((await hit(hook.endpoint_url, { n: 3 })).status, 200);
    const stored = (await entries(server, `/v1/sources/${hook.id}`))
      .map((e) => e.event.n)
      .sort((a, b) => a - b);
    assert.deepEqual(stored, [1, 3]);
    assert.deepEqual(unhandled, []);
  } finally {
    await close();
  }
});
