/**
 * The server's log, read as an operator reads it (pino's JSON lines written to a stream): a refused
 * request's line carries its message, and component errors and failed deliveries carry their IDs.
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
  server = await startServer({}, {}, { logger: { level: "info", stream } });
  owner = await server.createUser(unique("logged"));
});
after(() => server.close());

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

test("a refused request's log line has one msg, and it carries the error's message", async () => {
  const res = await server.api("GET", "/v1/users/me", {
    key: "fnt_wrongkey000000000000000000000000",
    headers: { "x-request-id": "refused-1" },
  });
  assert.equal(res.status, 401);
  const { raw, entry } = await logLine((e) => e.reqId === "refused-1" && e.code !== undefined);
  assert.equal(raw.match(/"msg":/g)?.length, 1, raw);
  assert.match(entry.msg, /Unknown or revoked API key/);
  assert.equal(entry.code, "unauthorized");
  assert.equal(entry.statusCode, 401);
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
