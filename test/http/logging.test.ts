/**
 * The server's log, read as an operator reads it (pino's JSON lines written to a stream, at debug so
 * that the lines below info can be counted too): one line per request, at debug unless it failed with a
 * 5xx, without query values; a refused request's line carries its message; component errors carry their
 * IDs; a failing delivery destination writes one line when it starts failing and one when it recovers,
 * not one per attempt, and /metrics counts both.
 */
import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { after, before, test } from "node:test";
import { Receiver } from "../delivery/receiver.ts";
import { deploy, fixture, hit } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";
import { unique } from "./openapi-walk.ts";

const lines: string[] = [];
const stream = new Writable({
  write(chunk, _encoding, done) {
    lines.push(...String(chunk).split("\n").filter(Boolean));
    done();
  },
});

let server: TestServer;
let owner: { id: string; key: string };
let receiver: Receiver;
before(async () => {
  server = await startServer({}, {}, { logger: { level: "debug", stream } });
  owner = await server.createUser(unique("logged"));
  receiver = await Receiver.start();
});
after(async () => {
  await receiver.close();
  await server.close();
});

/** pino's level numbers. */
const DEBUG = 20;
const INFO = 30;
const WARN = 40;
const ERROR = 50;

/** Every log line so far that `match` accepts. */
function logLines(match: (entry: any) => boolean): any[] {
  return lines.map((raw) => JSON.parse(raw)).filter(match);
}

/** Waits up to 30 s for `check` to hold. */
async function until(check: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`never saw ${what} in:\n${lines.slice(-20).join("\n")}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function metric(name: string, labels: Record<string, string> = {}): Promise<number> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  for (const line of text.split("\n")) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`)))
      return Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return 0;
}

/** The first log line (raw text and parsed) that `match` accepts, waiting up to 30 s for it. */
async function logLine(match: (entry: any) => boolean): Promise<{ raw: string; entry: any }> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    for (const raw of lines) {
      const entry = JSON.parse(raw);
      if (match(entry)) return { raw, entry };
    }
    if (Date.now() > deadline) throw new Error(`no such log line in:\n${lines.slice(-20).join("\n")}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test("a successful request leaves one line, at debug, without the values of its query", async () => {
  const res = await server.api("GET", "/v1/users/me?api_key=very-secret&limit=5", {
    headers: { "x-request-id": "fine-1" },
  });
  assert.equal(res.status, 200);
  const { raw, entry } = await logLine((e) => e.reqId === "fine-1");
  assert.equal(entry.level, DEBUG);
  assert.equal(entry.method, "GET");
  assert.equal(entry.url, "/v1/users/me?api_key=…&limit=…");
  assert.equal(entry.statusCode, 200);
  assert.equal(typeof entry.durationMs, "number");
  assert.doesNotMatch(raw, /very-secret/);
  // Answered and logged: the line is written once the answer is sent, so it is there by now.
  assert.equal(logLines((e) => e.reqId === "fine-1").length, 1);
  assert.equal(logLines((e) => e.reqId === "fine-1" && e.level >= INFO).length, 0);
});

test("a refused request leaves one line, at debug, that carries the error's code and message", async () => {
  const res = await server.api("GET", "/v1/users/me", {
    key: "fnt_wrongkey000000000000000000000000",
    headers: { "x-request-id": "refused-1" },
  });
  assert.equal(res.status, 401);
  const { raw, entry } = await logLine((e) => e.reqId === "refused-1");
  assert.equal(raw.match(/"msg":/g)?.length, 1, raw);
  assert.equal(entry.level, DEBUG);
  assert.match(entry.msg, /^GET \/v1\/users\/me answered 401 in \d+ ms: Unknown or revoked API key/);
  assert.equal(entry.code, "unauthorized");
  assert.equal(entry.statusCode, 401);
  assert.equal(logLines((e) => e.reqId === "refused-1").length, 1);
});

test("a request that fails with a 500 leaves one line, at error, with what was thrown", async () => {
  const store = server.built.services.store;
  const listWebhooks = store.listWebhooks;
  store.listWebhooks = async () => {
    throw new Error("the disk is on fire");
  };
  try {
    const res = await server.api("GET", "/v1/users/me/webhooks?cursor=abc", {
      headers: { "x-request-id": "failed-1" },
    });
    assert.equal(res.status, 500);
    assert.doesNotMatch(res.text, /fire/);
  } finally {
    store.listWebhooks = listWebhooks;
  }
  const { entry } = await logLine((e) => e.reqId === "failed-1");
  assert.equal(entry.level, ERROR);
  assert.match(entry.msg, /^GET \/v1\/users\/me\/webhooks\?cursor=… answered 500 in \d+ ms/);
  assert.equal(entry.statusCode, 500);
  assert.equal(entry.code, "internal");
  assert.equal(entry.err.message, "the disk is on fire");
  assert.match(entry.err.stack, /listWebhooks|logging\.test\.ts/);
  assert.equal(logLines((e) => e.reqId === "failed-1").length, 1);
});

test("a source endpoint's hit leaves one line too: at debug when it succeeds", async () => {
  const source = await deploy(server, { component_code: fixture("http-echo.mjs") }, owner.key);
  const res = await hit(source.configured_props.http.endpoint_url, {
    method: "POST",
    headers: { "x-request-id": "hit-1" },
  });
  assert.equal(res.status, 200);
  const { entry } = await logLine((e) => e.reqId === "hit-1");
  assert.equal(entry.level, DEBUG);
  assert.equal(entry.statusCode, 200);
  assert.equal(logLines((e) => e.reqId === "hit-1").length, 1);
});

test("a component error is logged with the source, its owner and the error code", async () => {
  const source = await deploy(server, { component_code: fixture("thrower.mjs") }, owner.key);
  const res = await hit(source.configured_props.http.endpoint_url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ fail: "this input" }),
  });
  assert.equal(res.status, 500);
  const { entry } = await logLine((e) => e.sourceId === source.id && e.code === "BAD_INPUT");
  assert.equal(entry.level, 40);
  assert.equal(entry.ownerId, owner.id);
  assert.equal(entry.trigger, "http");
  assert.match(entry.errorEventId, /^\d+-\d+$/);
  assert.match(entry.msg, /cannot handle this input/);
});

test("a component error is logged with its source, and the hit it failed with leaves one line at info", async () => {
  const source = await deploy(server, { component_code: fixture("thrower.mjs") }, owner.key);
  const res = await hit(source.configured_props.http.endpoint_url, {
    method: "POST",
    headers: { "content-type": "application/json", "x-request-id": "thrown-1" },
    body: JSON.stringify({ fail: "that input" }),
  });
  assert.equal(res.status, 500);
  const { entry } = await logLine((e) => e.reqId === "thrown-1");
  assert.equal(entry.level, INFO);
  assert.equal(entry.code, "component_error");
  assert.equal(entry.err, undefined, "the component's error is on the source's line, not the request's");
  await logLine((e) => e.sourceId === source.id && /cannot handle that input/.test(e.msg));
  assert.equal(logLines((e) => e.reqId === "thrown-1").length, 1);
});

test("a failing destination's line carries the IDs of the delivery that found it failing", async () => {
  const source = await deploy(server, { component_code: fixture("http-echo.mjs") }, owner.key);
  // A loopback receiver is refused by the default address policy: the delivery fails for good at once.
  const webhook = await server.api("POST", "/v1/webhooks", {
    key: owner.key,
    body: { url: "http://127.0.0.1:9/hook" },
  });
  assert.equal(webhook.status, 200, webhook.text);
  const sub = await server.api("POST", "/v1/subscriptions", {
    key: owner.key,
    body: { emitter_id: source.id, listener_id: webhook.body.data.id },
  });
  assert.equal(sub.status, 200, sub.text);
  assert.equal((await hit(source.configured_props.http.endpoint_url, { method: "POST" })).status, 200);
  const { entry } = await logLine((e) => e.listenerId === webhook.body.data.id && e.level >= INFO);
  assert.equal(entry.level, WARN);
  assert.equal(entry.destination, "failing");
  assert.match(entry.msg, new RegExp(`^webhook ${webhook.body.data.id} is failing: .*loopback`));
  assert.equal(entry.sourceId, source.id);
  assert.equal(entry.listenerKind, "webhook");
  assert.match(entry.deliveryId, /^del_/);
  assert.match(entry.subscriptionId, /^sub_/);
  assert.match(entry.eventId, /^\d+-\d+$/);
});

test("a webhook failing N times writes one line when it starts failing and one when it recovers, and /metrics counts both", async () => {
  const failures = 6;
  // The first `failures` requests get 500, every later one 200.
  receiver.answer = (_request, n) => (n < failures ? 500 : 200);
  const failing0 = await metric("fount_destination_state_changes_total", {
    kind: "webhook",
    state: "failing",
  });
  const recovered0 = await metric("fount_destination_state_changes_total", {
    kind: "webhook",
    state: "recovered",
  });
  const gauge0 = await metric("fount_destinations_failing");
  const source = await deploy(server, { component_code: fixture("http-echo.mjs") });
  // As an admin may: this webhook may reach the receiver on loopback.
  const webhook = await server.api("POST", "/v1/webhooks", {
    body: { url: receiver.url, allow_private: true },
  });
  assert.equal(webhook.status, 200, webhook.text);
  const id = webhook.body.data.id;
  const sub = await server.api("POST", "/v1/subscriptions", {
    body: { emitter_id: source.id, listener_id: id },
  });
  assert.equal(sub.status, 200, sub.text);
  for (let i = 0; i < failures; i++) {
    const res = await hit(source.configured_props.http.endpoint_url, { method: "POST", body: `{"n":${i}}` });
    assert.equal(res.status, 200);
  }
  // Each failed attempt has its line at debug; above it, one line for them all.
  await until(
    () =>
      logLines((e) => e.listenerId === id && e.level === DEBUG && /will retry/.test(e.msg)).length ===
      failures,
    `${failures} failed attempts`,
  );
  const failing = logLines((e) => e.listenerId === id && e.level >= INFO);
  assert.equal(failing.length, 1, JSON.stringify(failing));
  assert.equal(failing[0].level, WARN);
  assert.match(failing[0].msg, new RegExp(`^webhook ${id} is failing: .*500`));
  assert.equal(await metric("fount_destinations_failing"), gauge0 + 1);
  assert.equal(
    await metric("fount_destination_state_changes_total", { kind: "webhook", state: "failing" }),
    failing0 + 1,
  );

  // The next event gets through: the webhook has recovered.
  const res = await hit(source.configured_props.http.endpoint_url, { method: "POST", body: '{"n":"last"}' });
  assert.equal(res.status, 200);
  const { entry } = await logLine((e) => e.listenerId === id && e.destination === "recovered");
  assert.equal(entry.level, INFO);
  assert.equal(entry.failedAttempts, failures);
  assert.match(
    entry.msg,
    new RegExp(
      `^webhook ${id} recovered after [\\d a-z]+: ${failures} failed attempts, 0 deliveries given up$`,
    ),
  );
  assert.equal(logLines((e) => e.listenerId === id && e.level >= INFO).length, 2);
  assert.equal(await metric("fount_destinations_failing"), gauge0);
  assert.equal(
    await metric("fount_destination_state_changes_total", { kind: "webhook", state: "recovered" }),
    recovered0 + 1,
  );
});
