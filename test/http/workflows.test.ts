/**
 * External workflows (extension): registration with a signing secret shown once, emits and errors
 * recorded by their runner and read back through the spec's workflow event summaries, a round trip in
 * which Fount delivers to the workflow and routes what it emits, and tenancy.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Webhook } from "standardwebhooks";
import type { DeliveryDispatcher } from "../../src/delivery/dispatcher.ts";
import {
  createWebhook,
  deploySource,
  emit,
  entries,
  hookSourceCode,
  Receiver,
  subscribe,
} from "../delivery/receiver.ts";
import { eventsPruned } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";
import { assertApiError } from "./openapi-walk.ts";

let server: TestServer;
let dispatcher: DeliveryDispatcher;
let user: { id: string; key: string };
before(async () => {
  server = await startServer({ webhookAllowPrivate: true });
  dispatcher = server.built.services.dispatcher;
  user = await server.createUser(`flows-${process.pid}`);
});
after(() => server.close());

async function register(body: Record<string, unknown>, key = user.key): Promise<any> {
  const res = await server.api("POST", "/v1/workflows", { key, body });
  assert.equal(res.status, 200, res.text);
  return res.body.data;
}

test("a registered workflow shows its signing secret once, and is read, listed and deleted", async () => {
  const flow = await register({ name: "enrich", url: "https://runner.example.com/in" });
  assert.match(flow.id, /^p_[A-Za-z0-9]+$/);
  assert.equal(flow.user_id, user.id);
  assert.equal(flow.name, "enrich");
  assert.equal(flow.url, "https://runner.example.com/in");
  assert.match(flow.signing_secret, /^whsec_[A-Za-z0-9+/]{32}$/);
  const read = await server.api("GET", `/v1/workflows/${flow.id}`, { key: user.key });
  assert.equal(read.status, 200);
  assert.equal(read.body.data.signing_secret, undefined, "shown only on creation");
  assert.equal(read.body.data.name, "enrich");
  const bare = await register({ name: "no url" });
  assert.equal(bare.url, null);

  const list = await server.api("GET", "/v1/users/me/workflows?limit=1", { key: user.key });
  assert.equal(list.status, 200);
  assert.equal(list.body.page_info.count, 1);
  assert.ok(list.body.page_info.total_count >= 2);
  assert.equal(list.body.data[0].id, bare.id, "newest first");
  assert.equal(list.body.data[0].user_id, undefined);
  const next = await server.api(
    "GET",
    `/v1/users/me/workflows?limit=1&after=${list.body.page_info.end_cursor}`,
    {
      key: user.key,
    },
  );
  assert.equal(next.body.data[0].id, flow.id);

  await server.api("POST", `/v1/workflows/${flow.id}/emits`, { key: user.key, body: { event: { n: 1 } } });
  const del = await server.api("DELETE", `/v1/workflows/${flow.id}`, { key: user.key });
  assert.deepEqual(del.body, { data: { id: flow.id } });
  for (const path of [`/v1/workflows/${flow.id}`, `/v1/workflows/${flow.id}/event_summaries`]) {
    assertApiError(
      await server.api("GET", path, { key: user.key }),
      { status: 404, code: "not_found" },
      path,
    );
  }
  // Its events go in the background, in the pruner's batches.
  await eventsPruned(server, flow.id);
});

test("emits are stored as {raw_event} on the default or a named channel", async () => {
  const flow = await register({ name: "emitter" });
  const emitIt = (body: Record<string, unknown>) =>
    server.api("POST", `/v1/workflows/${flow.id}/emits`, { key: user.key, body });
  const first = await emitIt({ event: { order: 1 } });
  assert.equal(first.status, 200, first.text);
  assert.deepEqual(first.body.data.event, { raw_event: { order: 1 } });
  await emitIt({ event: "two", name: "default" });
  await emitIt({ event: [3], name: "custom" });
  assertApiError(await emitIt({ event: 1, name: "$errors" }), { status: 400, code: "invalid_parameter" });
  assertApiError(await emitIt({ name: "x" }), { status: 400 }, "event is required");

  const res = await server.api("GET", `/v1/workflows/${flow.id}/event_summaries`, { key: user.key });
  assert.equal(res.status, 200);
  assert.equal(res.body.page_info.total_count, 2);
  const [latest, earlier] = res.body.data;
  assert.deepEqual(latest.event, { raw_event: "two" });
  assert.deepEqual(earlier.event, { raw_event: { order: 1 } });
  assert.match(latest.id, /^\d+-\d+$/);
  assert.equal(typeof latest.indexed_at_ms, "number");
  assert.equal(latest.metadata.name, "");
  assert.equal(latest.metadata.emitter_id, flow.id);
  assert.equal(typeof latest.metadata.emit_id, "string");
  const custom = await entries(server, `/v1/workflows/${flow.id}`, "custom", user.key);
  assert.deepEqual(
    custom.map((e) => e.event),
    [{ raw_event: [3] }],
  );
  const big = { text: "x".repeat(2000) };
  await emitIt({ event: big });
  const truncated = await server.api("GET", `/v1/workflows/${flow.id}/event_summaries?limit=1`, {
    key: user.key,
  });
  assert.equal(truncated.body.data[0].event.$truncated, true);
});

test("errors go to $errors with original_context and error.ts filled in where the runner left them out", async () => {
  const flow = await register({ name: "failing" });
  const before = Date.now();
  const res = await server.api("POST", `/v1/workflows/${flow.id}/errors`, {
    key: user.key,
    body: {
      original_event: { order: 7 },
      original_context: { id: "ctx-1", source_type: "runner", workflow_id: "p_forged", owner_id: "u_forged" },
      error: { code: "TypeError", message: "x is undefined", cellId: "c_1", stack: "at step 1" },
    },
  });
  assert.equal(res.status, 200, res.text);
  await server.api("POST", `/v1/workflows/${flow.id}/errors`, {
    key: user.key,
    body: { original_event: null, error: { code: "Timeout", ts: "2026-01-02T03:04:05.000Z" } },
  });
  const errors = await server.api("GET", `/v1/workflows/${flow.id}/$errors/event_summaries?expand=event`, {
    key: user.key,
  });
  assert.equal(errors.status, 200);
  const [second, first] = errors.body.data;
  assert.equal(first.metadata.name, "$errors");
  assert.deepEqual(first.event.original_event, { order: 7 });
  const ctx = first.event.original_context;
  assert.equal(ctx.id, "ctx-1");
  assert.equal(ctx.source_type, "runner");
  assert.equal(ctx.workflow_id, flow.id, "always the workflow's own id");
  assert.equal(ctx.owner_id, user.id);
  assert.equal(ctx.verified, false);
  assert.equal(typeof ctx.platform_version, "string");
  assert.equal(typeof ctx.deployment_id, "string");
  assert.ok(Date.parse(ctx.ts) >= before - 1000);
  assert.deepEqual(
    { ...first.event.error, ts: undefined },
    { code: "TypeError", message: "x is undefined", cellId: "c_1", stack: "at step 1", ts: undefined },
  );
  assert.ok(Date.parse(first.event.error.ts) >= before - 1000, "ts filled in");
  assert.deepEqual(second.event.error, {
    code: "Timeout",
    cellId: null,
    ts: "2026-01-02T03:04:05.000Z",
    stack: null,
  });
  assert.equal(second.event.original_context.id.length > 0, true);

  const emits = await server.api("GET", `/v1/workflows/${flow.id}/event_summaries`, { key: user.key });
  assert.equal(emits.body.page_info.total_count, 0, "errors are not emits");
  const bad = await server.api("POST", `/v1/workflows/${flow.id}/errors`, {
    key: user.key,
    body: { original_event: {}, error: { message: "no code" } },
  });
  assertApiError(bad, { status: 400 });
  const extra = await server.api("POST", `/v1/workflows/${flow.id}/errors`, {
    key: user.key,
    body: { original_event: {}, error: { code: "x", unknown: 1 } },
  });
  assertApiError(extra, { status: 400 });
});

test("round trip: events routed to a workflow are POSTed to it signed, and what it emits is routed on", async () => {
  const runner = await Receiver.start();
  const sink = await Receiver.start();
  try {
    const flow = await register({ name: "round trip", url: runner.url });
    const source = await deploySource(server, hookSourceCode, user.key);
    const hook = await createWebhook(server, sink.url, user.key);
    await subscribe(server, { emitter_id: source.id, listener_id: flow.id }, user.key);
    await subscribe(server, { emitter_id: "p_*", listener_id: hook.id }, user.key);

    await emit(source.endpoint, { order: 42 });
    await dispatcher.drain();
    assert.equal(runner.requests.length, 1);
    const got = runner.requests[0]!;
    assert.deepEqual(
      new Webhook(flow.signing_secret).verify(got.body, got.headers as Record<string, string>),
      {
        order: 42,
      },
    );
    assert.equal(got.headers["x-fount-emitter-id"], source.id);
    assert.match(String(got.headers["webhook-id"]), /^del_/);

    // The runner does its work and reports its emit.
    const res = await server.api("POST", `/v1/workflows/${flow.id}/emits`, {
      key: user.key,
      body: { event: { enriched: got.json.order + 1 } },
    });
    assert.equal(res.status, 200, res.text);
    await dispatcher.drain();
    assert.equal(sink.requests.length, 1);
    assert.deepEqual(sink.requests[0]!.json, { raw_event: { enriched: 43 } });
    assert.equal(sink.requests[0]!.headers["x-fount-emitter-id"], flow.id);
  } finally {
    await Promise.all([runner.close(), sink.close()]);
  }
});

test("a workflow without a url gets its deliveries recorded as delivered, without a request", async () => {
  const flow = await register({ name: "silent" });
  const source = await deploySource(server, hookSourceCode, user.key);
  await subscribe(server, { emitter_id: source.id, listener_id: flow.id }, user.key);
  await emit(source.endpoint, { n: 1 });
  await dispatcher.drain();
  const page = await server.built.services.store.listDeliveries(flow.id, { limit: 10 });
  assert.equal(page.items.length, 1);
  const d = page.items[0]!;
  assert.equal(d.status, "succeeded");
  assert.equal(d.attempts, 0);
  assert.match(d.lastError ?? "", /no url/);
});

test("an auto-subscription covers workflows registered after it, as the specification says, and not those before", async () => {
  const owner = await server.createUser(`flows-auto-${process.pid}`);
  const before = await register({ name: "before" }, owner.key);
  const listener = await register({ name: "listener" }, owner.key);
  const rule = await server.api("POST", "/v1/auto_subscriptions", {
    key: owner.key,
    body: { listener_id: listener.id, event_name: "" },
  });
  assert.equal(rule.status, 200, rule.text);
  const later = await register({ name: "later" }, owner.key);
  const subs = await server.api("GET", "/v1/users/me/subscriptions?limit=100", { key: owner.key });
  assert.equal(subs.status, 200, subs.text);
  const routes = subs.body.data.map((s: { emitter_id: string; listener_id: string }) => [
    s.emitter_id,
    s.listener_id,
  ]);
  assert.deepEqual(routes, [[later.id, listener.id]]);
  // What the later workflow emits reaches the listener; what the earlier one emits does not.
  for (const flow of [before, later]) {
    const res = await server.api("POST", `/v1/workflows/${flow.id}/emits`, {
      key: owner.key,
      body: { event: { from: flow.name } },
    });
    assert.equal(res.status, 200, res.text);
  }
  const queued = await server.built.services.store.listDeliveries(listener.id, { limit: 10 });
  assert.deepEqual(
    queued.items.map((d) => d.emitterId),
    [later.id],
  );
});

test("another tenant's workflow is 404 on every route, and as emitter or listener of a subscription", async () => {
  const flow = await register({ name: "private" });
  const intruder = await server.createUser(`flows-intruder-${process.pid}`);
  const tries: Array<[string, string, unknown?]> = [
    ["GET", `/v1/workflows/${flow.id}`],
    ["DELETE", `/v1/workflows/${flow.id}`],
    ["GET", `/v1/workflows/${flow.id}/event_summaries`],
    ["GET", `/v1/workflows/${flow.id}/$errors/event_summaries`],
    ["POST", `/v1/workflows/${flow.id}/emits`, { event: 1 }],
    ["POST", `/v1/workflows/${flow.id}/errors`, { original_event: 1, error: { code: "x" } }],
    ["POST", "/v1/subscriptions", { emitter_id: flow.id, listener_id: "dc_*" }],
    ["POST", "/v1/subscriptions", { emitter_id: "dc_*", listener_id: flow.id }],
  ];
  const hook = await createWebhook(server, "https://example.com/x", intruder.key);
  tries[6]![2] = { emitter_id: flow.id, listener_id: hook.id };
  for (const [method, path, body] of tries) {
    assertApiError(
      await server.api(method, path, { key: intruder.key, body }),
      { status: 404 },
      `${method} ${path}`,
    );
  }
  const mine = await server.api("GET", "/v1/users/me/workflows", { key: intruder.key });
  assert.deepEqual(mine.body.data, []);
  assert.equal(
    (await server.api("GET", `/v1/workflows/${flow.id}`, { key: user.key })).status,
    200,
    "still there",
  );
});

test("bad input to POST /v1/workflows is a 400", async () => {
  const cases: Array<Record<string, unknown>> = [
    {},
    { name: "" },
    { name: "x", url: "ftp://example.com/" },
    { name: "x", url: "example.com" },
    { name: "x", extra: true },
    { name: 5 },
  ];
  for (const body of cases) {
    assertApiError(
      await server.api("POST", "/v1/workflows", { key: user.key, body }),
      { status: 400 },
      JSON.stringify(body),
    );
  }
});
