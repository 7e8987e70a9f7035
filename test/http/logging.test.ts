/**
 * The server's log, read as an operator reads it (pino's JSON lines written to a stream, at debug so
 * that the lines below info can be counted too): one line per request, at debug unless it failed with a
 * 5xx, without query values; a refused request's line carries its message; component errors and failed
 * deliveries carry their IDs.
 */
import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { after, before, test } from "node:test";
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
before(async () => {
  server = await startServer({}, {}, { logger: { level: "debug", stream } });
  owner = await server.createUser(unique("logged"));
});
after(() => server.close());

/** pino's level numbers. */
const DEBUG = 20;
const INFO = 30;
const ERROR = 50;

/** Every log line so far that `match` accepts. */
function logLines(match: (entry: any) => boolean): any[] {
  return lines.map((raw) => JSON.parse(raw)).filter(match);
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

test("a failed delivery is logged with its delivery, subscription, source, event and webhook IDs", async () => {
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
  const { entry } = await logLine((e) => e.listenerId === webhook.body.data.id);
  assert.equal(entry.level, 40);
  assert.match(entry.msg, /^delivery failed: /);
  assert.equal(entry.sourceId, source.id);
  assert.equal(entry.listenerKind, "webhook");
  assert.match(entry.deliveryId, /^del_/);
  assert.match(entry.subscriptionId, /^sub_/);
  assert.match(entry.eventId, /^\d+-\d+$/);
});
