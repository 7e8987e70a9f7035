/**
 * Delivery history over HTTP, against real local receivers: each attempt's request and answer (a
 * receiver that answers 500 with a body, one that never answers, one that refuses the connection, one
 * that answers too much), the signing secret shown nowhere, the filters of the deliveries lists, the
 * links between a delivery and its event, replay of one event and of a range with its marker, and
 * tenancy of all of it.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { DeliveryDispatcher } from "../../src/delivery/dispatcher.ts";
import {
  createWebhook,
  deliveries,
  deploySource,
  emit,
  entries,
  hookSourceCode,
  Receiver,
  relaySourceCode,
  scriptedReceivers,
  subscribe,
} from "../delivery/receiver.ts";
import { startServer, type TestServer } from "../helpers.ts";
import { assertApiError } from "./openapi-walk.ts";

let server: TestServer;
let dispatcher: DeliveryDispatcher;
before(async () => {
  server = await startServer({ webhookAllowPrivate: true });
  dispatcher = server.built.services.dispatcher;
});
after(() => server.close());

/** A fresh receiver per test that scripts its answers, closed after the test. */
const scripted = scriptedReceivers();

/** A source subscribed to a webhook at `url`, owned by `key` (default the admin). */
async function setUp(url: string, key?: string) {
  const source = await deploySource(server, hookSourceCode, key);
  const hook = await createWebhook(server, url, key);
  await subscribe(server, { emitter_id: source.id, listener_id: hook.id }, key);
  return { source, hook };
}

/** The one delivery of the webhook, in full. */
async function onlyDelivery(hookId: string, key?: string): Promise<any> {
  const [d] = await deliveries(server, hookId, key);
  const res = await server.api("GET", `/v1/webhooks/${hookId}/deliveries/${d.id}`, { key });
  assert.equal(res.status, 200, res.text);
  return res.body.data;
}

test("finished deliveries past their retention are pruned in batches, and the deliveries API no longer lists them", async () => {
  const r = await scripted(() => ({ status: 200, body: "ok" }));
  const { source, hook } = await setUp(r.url);
  for (let i = 0; i < 5; i++) await emit(source.endpoint, { i });
  await dispatcher.drain();
  assert.equal((await deliveries(server, hook.id)).length, 5);
  const saved = { ...dispatcher.options };
  // Every finished delivery is past a retention that ends a minute from now; two per statement.
  Object.assign(dispatcher.options, { retentionMs: -60_000, pruneBatch: 2, pruneRate: 1_000_000 });
  try {
    assert.ok((await dispatcher.pruneFinished()) >= 5, "at least this webhook's five");
  } finally {
    Object.assign(dispatcher.options, saved);
  }
  assert.deepEqual(await deliveries(server, hook.id), []);
  const res = await server.api("GET", `/v1/sources/${source.id}/events`);
  assert.equal(res.body.data.length, 5, "the events stay: only their deliveries are gone");
});

test("an attempt answered 500 with a body records what was sent and what came back, and never the secret", async () => {
  const r = await scripted(() => ({
    status: 500,
    headers: { "content-type": "application/json", "x-reason": "db down" },
    body: '{"error":"db down"}',
  }));
  const { source, hook } = await setUp(`${r.url}?token=abc`);
  await emit(source.endpoint, { order: 7, text: "héllo" });
  await dispatcher.drain();

  const d = await onlyDelivery(hook.id);
  const got = r.requests[0]!;
  assert.equal(d.attempt_count, 1);
  assert.equal(d.listener_kind, "webhook");
  assert.equal(d.replay, null);
  const [a] = d.attempts;
  assert.equal(a.n, 1);
  assert.ok(Math.abs(a.at_ms - Date.now()) < 60_000);
  assert.ok(Number.isInteger(a.duration_ms));
  assert.equal(a.request.url, `${r.url}?token=abc`);
  assert.equal(a.request.body, got.body, "the body sent, byte for byte");
  for (const name of [
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "x-fount-event-id",
    "user-agent",
  ])
    assert.equal(a.request.headers[name], got.headers[name], name);
  assert.match(a.request.headers["webhook-signature"], /^v1,/);
  assert.equal(a.response.status, 500);
  assert.equal(a.response.headers["x-reason"], "db down");
  assert.equal(a.response.body, '{"error":"db down"}');
  assert.equal(a.response.truncated, false);
  assert.equal(a.error, "HTTP 500");
  assert.equal(a.error_kind, "http");
  assert.equal(a.outcome, "retry");
  assert.equal(a.replay, false);
  const key = hook.secret.replace(/^whsec_/, "");
  for (const path of [
    `/v1/webhooks/${hook.id}/deliveries/${d.id}`,
    `/v1/deliveries/${d.id}`,
    `/v1/webhooks/${hook.id}/deliveries`,
  ]) {
    const text = (await server.api("GET", path)).text;
    assert.ok(!text.includes(key), `${path} shows no part of the signing secret`);
  }

  // The same delivery without naming the webhook, and the links both ways.
  const byId = await server.api("GET", `/v1/deliveries/${d.id}`);
  assert.deepEqual(byId.body.data, d);
  assert.equal(d.links.listener, `/v1/webhooks/${hook.id}`);
  const event = await server.api("GET", d.links.event);
  assert.equal(event.status, 200, event.text);
  assert.deepEqual(event.body.data.event, { order: 7, text: "héllo" });
  assert.equal(event.body.data.id, d.event_id);
  const listed = await server.api("GET", d.links.event_deliveries);
  assert.deepEqual(
    listed.body.data.map((x: any) => x.id),
    [d.id],
  );
});

test("an attempt the receiver never answers records no response and says it timed out", async () => {
  const r = await scripted(() => "hang");
  const { source, hook } = await setUp(r.url);
  const timeout = dispatcher.options.timeoutMs;
  dispatcher.options.timeoutMs = 300;
  try {
    await emit(source.endpoint, { n: 1 });
    await dispatcher.drain();
  } finally {
    dispatcher.options.timeoutMs = timeout;
  }
  const [a] = (await onlyDelivery(hook.id)).attempts;
  assert.equal(a.response, null);
  assert.equal(a.error, "timed out after 300 ms");
  assert.equal(a.error_kind, "timeout");
  assert.equal(a.request.url, r.url);
  assert.equal(a.request.headers["webhook-id"], r.requests[0]!.headers["webhook-id"]);
  assert.ok(a.duration_ms >= 250, `waited for the timeout (${a.duration_ms} ms)`);
});

test("an attempt whose connection is refused says so in words", async () => {
  const gone = await Receiver.start();
  await gone.close();
  const { source, hook } = await setUp(gone.url);
  await emit(source.endpoint, { n: 1 });
  await dispatcher.drain();
  const d = await onlyDelivery(hook.id);
  const [a] = d.attempts;
  assert.equal(a.response, null);
  assert.equal(a.error_kind, "refused");
  assert.match(
    a.error,
    /^connection refused: nothing accepts connections at 127\.0\.0\.1:\d+ \(ECONNREFUSED\)$/,
  );
  assert.equal(d.last_error, a.error);
});

test("an attempt to a name that does not resolve says it is DNS", async () => {
  // `.invalid` never resolves (RFC 6761); a resolver that cannot be reached fails as DNS too.
  const { source, hook } = await setUp("http://no-such-host.invalid/hook");
  await emit(source.endpoint, { n: 1 });
  await dispatcher.drain();
  const [a] = (await onlyDelivery(hook.id)).attempts;
  assert.equal(a.error_kind, "dns");
  assert.match(
    a.error,
    /^DNS: (no-such-host\.invalid does not resolve \(ENOTFOUND\)|the lookup of no-such-host\.invalid failed)/,
  );
});

test("the answer is kept up to 64 KB and marked cut beyond; U+0000 in it is stored as U+FFFD", async () => {
  const big = "é".repeat(40_000); // 80,000 bytes
  const r = await scripted((_q, n) =>
    n === 0 ? { status: 400, body: big } : { status: 422, body: "a\u0000b" },
  );
  const { source, hook } = await setUp(r.url);
  await emit(source.endpoint, { n: 1 });
  await emit(source.endpoint, { n: 2 });
  await dispatcher.drain();
  const list = await deliveries(server, hook.id);
  const full = await Promise.all(
    list.map(async (d) => (await server.api("GET", `/v1/deliveries/${d.id}`)).body.data.attempts[0].response),
  );
  const cut = full.find((x) => x.status === 400);
  assert.equal(cut.truncated, true);
  assert.equal(Buffer.byteLength(cut.body), 64 * 1024);
  assert.ok(big.startsWith(cut.body));
  assert.equal(full.find((x) => x.status === 422).body, "a\uFFFDb");
  const listed = list.find((d) => d.last_status_code === 400);
  assert.equal(listed.attempt_history[0].response.length, 512, "the list shows the first 512 characters");
});

test("deliveries lists filter by status, time and status code; an event's list has every listener's", async () => {
  const [ok, failing] = [await scripted(() => 200), await scripted(() => 503)];
  const source = await deploySource(server, hookSourceCode);
  const good = await createWebhook(server, ok.url);
  const bad = await createWebhook(server, failing.url);
  await subscribe(server, { emitter_id: source.id, listener_id: good.id });
  await subscribe(server, { emitter_id: source.id, listener_id: bad.id });
  const before = Date.now();
  await emit(source.endpoint, { n: 1 });
  await dispatcher.drain();
  const list = (path: string) =>
    server.api("GET", path).then((res) => {
      assert.equal(res.status, 200, res.text);
      return res.body.data.map((d: any) => d.listener_id);
    });
  assert.deepEqual(await list(`/v1/webhooks/${bad.id}/deliveries?status_code=5xx`), [bad.id]);
  assert.deepEqual(await list(`/v1/webhooks/${bad.id}/deliveries?status_code=503&status=pending`), [bad.id]);
  assert.deepEqual(await list(`/v1/webhooks/${bad.id}/deliveries?status_code=2xx`), []);
  assert.deepEqual(await list(`/v1/webhooks/${good.id}/deliveries?since=${before - 1000}`), [good.id]);
  const iso = new Date(before - 60_000).toISOString();
  assert.deepEqual(await list(`/v1/webhooks/${good.id}/deliveries?until=${encodeURIComponent(iso)}`), []);
  assertApiError(await server.api("GET", `/v1/webhooks/${good.id}/deliveries?since=yesterday`), {
    status: 400,
    code: "invalid_parameter",
  });
  assertApiError(await server.api("GET", `/v1/webhooks/${good.id}/deliveries?status_code=5x`), {
    status: 400,
  });
  for (const until of ["1e%2B308", "99999999999999999", "8640000000000001"])
    assertApiError(await server.api("GET", `/v1/webhooks/${good.id}/deliveries?until=${until}`), {
      status: 400,
    });

  const [event] = await entries(server, `/v1/sources/${source.id}`);
  const path = `/v1/sources/${source.id}/events/${event.id}/deliveries`;
  assert.deepEqual((await list(path)).sort(), [good.id, bad.id].sort());
  assert.deepEqual(await list(`${path}?listener_id=${good.id}`), [good.id]);
  assert.deepEqual(await list(`${path}?status=succeeded`), [good.id]);
  assert.deepEqual(await list(`/v1/sources/${source.id}/events/1-0/deliveries`), [], "an event without any");
});

test("replaying an event sends it again as a new delivery marked as a replay of the earlier one", async () => {
  const r = await scripted(() => 200);
  const { source, hook } = await setUp(r.url);
  await emit(source.endpoint, { n: 1 });
  await dispatcher.drain();
  const [original] = await deliveries(server, hook.id);
  const res = await server.api("POST", `/v1/sources/${source.id}/events/${original.event_id}/replay`, {
    body: { listener_id: hook.id },
  });
  assert.equal(res.status, 200, res.text);
  const { replayed, matching, replay_id, delivery_id } = res.body.data;
  assert.deepEqual([replayed, matching], [1, 1]);
  assert.match(replay_id, /^rpl_/);
  await dispatcher.drain();

  assert.equal(r.requests.length, 2);
  const [first, again] = r.requests;
  assert.equal(again!.body, first!.body, "the same event");
  assert.equal(again!.headers["webhook-id"], delivery_id, "a delivery of its own");
  assert.notEqual(again!.headers["webhook-id"], first!.headers["webhook-id"]);
  const d = (await server.api("GET", `/v1/webhooks/${hook.id}/deliveries/${delivery_id}`)).body.data;
  assert.equal(d.status, "succeeded");
  assert.deepEqual(d.replay, { id: replay_id, replayed_from: original.id });
  assert.equal(d.attempts[0].replay, true);
  const listed = await deliveries(server, hook.id);
  assert.deepEqual(
    listed.map((x) => [x.id, x.replay?.id ?? null, x.attempt_history[0].replay]),
    [
      [delivery_id, replay_id, true],
      [original.id, null, false],
    ],
  );
  const ofEvent = await server.api("GET", `/v1/sources/${source.id}/events/${original.event_id}/deliveries`);
  assert.deepEqual(
    ofEvent.body.data.map((x: any) => x.id),
    [delivery_id, original.id],
  );

  // To a webhook never subscribed: nothing to repeat, still a replay.
  const other = await scripted(() => 200);
  const fresh = await createWebhook(server, other.url);
  const to = await server.api("POST", `/v1/sources/${source.id}/events/${original.event_id}/replay`, {
    body: { listener_id: fresh.id },
  });
  await dispatcher.drain();
  assert.equal(other.requests.length, 1);
  assert.deepEqual(other.requests[0]!.json, { n: 1 });
  const theirs = (await server.api("GET", `/v1/deliveries/${to.body.data.delivery_id}`)).body.data;
  assert.deepEqual(theirs.replay, { id: to.body.data.replay_id, replayed_from: null });
});

test("a range replay counts first, then sends the channel's events in the range oldest first; a q without a word of 3 characters or more is refused", async () => {
  const r = await scripted(() => 200);
  const source = await deploySource(server, hookSourceCode);
  const hook = await createWebhook(server, r.url);
  for (let n = 1; n <= 3; n++) await emit(source.endpoint, { n });
  await emit(source.endpoint, { n: "other" }, "other");
  const ids = (await entries(server, `/v1/sources/${source.id}`)).map((e) => e.id).reverse();
  const since = Number(ids[1]!.split("-")[0]);
  const path = `/v1/sources/${source.id}/events/replay`;

  const count = await server.api("POST", path, { body: { listener_id: hook.id, since, dry_run: true } });
  assert.deepEqual(count.body, { data: { replayed: 0, matching: 2, replay_id: null } });
  await dispatcher.drain();
  assert.equal(r.requests.length, 0, "a dry run sends nothing");

  const all = await server.api("POST", path, { body: { listener_id: hook.id } });
  assert.equal(all.body.data.replayed, 3);
  await dispatcher.drain();
  assert.deepEqual(r.requests.map((q) => q.json.n).sort(), [1, 2, 3]);
  const queued = (await deliveries(server, hook.id)).reverse();
  assert.deepEqual(
    queued.map((d) => d.event_id),
    ids,
    "queued oldest first",
  );
  assert.ok(queued.every((d) => d.replay.id === all.body.data.replay_id));

  const other = await server.api("POST", path, { body: { listener_id: hook.id, event_name: "other" } });
  assert.equal(other.body.data.replayed, 1);
  const none = await server.api("POST", path, {
    body: { listener_id: hook.id, until: new Date(Date.now() - 3_600_000).toISOString() },
  });
  assert.deepEqual(none.body.data, { replayed: 0, matching: 0, replay_id: null });
  assertApiError(await server.api("POST", path, { body: { listener_id: hook.id, q: "x" } }), {
    status: 400,
    code: "invalid_parameter",
  });
});

test("a source listener gets a replayed event as a run, and its attempt has no request URL", async () => {
  const source = await deploySource(server, hookSourceCode);
  const listener = await deploySource(server, relaySourceCode);
  await emit(source.endpoint, { n: 1 });
  const [event] = await entries(server, `/v1/sources/${source.id}`);
  const res = await server.api("POST", `/v1/sources/${source.id}/events/${event.id}/replay`, {
    body: { listener_id: listener.id },
  });
  assert.equal(res.status, 200, res.text);
  await dispatcher.drain();
  const d = (await server.api("GET", `/v1/deliveries/${res.body.data.delivery_id}`)).body.data;
  assert.equal(d.status, "succeeded");
  assert.equal(d.listener_kind, "source");
  assert.equal(d.links.listener, `/v1/sources/${listener.id}`);
  assert.deepEqual(d.attempts[0].request, { url: null, headers: null, body: '{"n":1}' });
  assert.equal(d.attempts[0].response, null);
  const relayed = await entries(server, `/v1/sources/${listener.id}`);
  assert.deepEqual(relayed[0].event, { relayed: { n: 1 }, hop: 1 });
});

test("no route shows or replays another tenant's deliveries or events", async () => {
  const owner = await server.createUser(`hist-owner-${process.pid}`);
  const intruder = await server.createUser(`hist-intruder-${process.pid}`);
  const r = await scripted(() => 200);
  const { source, hook } = await setUp(r.url, owner.key);
  await emit(source.endpoint, { secret: "of the owner" });
  await dispatcher.drain();
  const [d] = await deliveries(server, hook.id, owner.key);
  const theirs = await setUp(r.url, intruder.key);
  await emit(theirs.source.endpoint, { n: "intruder's" });
  const [ownEvent] = await entries(server, `/v1/sources/${theirs.source.id}`, undefined, intruder.key);
  const tries: Array<[string, string, unknown?]> = [
    ["GET", `/v1/webhooks/${hook.id}/deliveries/${d.id}`],
    ["GET", `/v1/webhooks/${theirs.hook.id}/deliveries/${d.id}`],
    ["GET", `/v1/deliveries/${d.id}`],
    ["GET", `/v1/sources/${source.id}/events/${d.event_id}`],
    ["GET", `/v1/sources/${source.id}/events/${d.event_id}/deliveries`],
    ["GET", `/v1/sources/${theirs.source.id}/events/${d.event_id}`],
    ["POST", `/v1/sources/${source.id}/events/${d.event_id}/replay`, { listener_id: theirs.hook.id }],
    ["POST", `/v1/sources/${theirs.source.id}/events/${ownEvent.id}/replay`, { listener_id: hook.id }],
    ["POST", `/v1/sources/${source.id}/events/replay`, { listener_id: theirs.hook.id }],
    ["POST", `/v1/sources/${theirs.source.id}/events/replay`, { listener_id: hook.id, dry_run: true }],
  ];
  for (const [method, path, body] of tries) {
    assertApiError(
      await server.api(method, path, { key: intruder.key, body }),
      { status: 404, code: "not_found" },
      `${method} ${path}`,
    );
  }
  // The intruder's own event's deliveries never include the owner's, whatever the event ID.
  const mine = await server.api("GET", `/v1/sources/${theirs.source.id}/events/${d.event_id}/deliveries`, {
    key: intruder.key,
  });
  assert.deepEqual(mine.body.data, []);
  await dispatcher.drain();
  assert.equal(r.requests.filter((q) => q.json?.secret).length, 1, "nothing of the owner's was replayed");
});

test("a member who leaves an organization stops routing across it, and no longer sees its webhook through deliveries", async () => {
  const alice = await server.createUser(`org-owner-${process.pid}`);
  const mallory = await server.createUser(`org-leaver-${process.pid}`);
  const made = await server.api("POST", "/v1/admin/orgs", {
    body: { orgname: `leavers-${process.pid}`, owner_id: alice.id },
  });
  assert.equal(made.status, 200, made.text);
  const org = made.body.data.id as string;
  const joined = await server.api("POST", `/v1/admin/orgs/${org}/members`, { body: { user_id: mallory.id } });
  assert.equal(joined.status, 200, joined.text);
  const orgReceiver = await scripted(() => 200);
  const herReceiver = await scripted(() => 200);
  const orgHook = await server.api("POST", "/v1/webhooks", {
    key: alice.key,
    body: { url: orgReceiver.url, org_id: org },
  });
  assert.equal(orgHook.status, 200, orgHook.text);
  const wo = orgHook.body.data.id as string;
  const source = await deploySource(server, hookSourceCode, mallory.key);
  const wm = (await createWebhook(server, herReceiver.url, mallory.key)).id;
  // While a member: her source to the organization's webhook, the organization's sources to her
  // webhook, rules for sources to come both ways, and a route of her own.
  await subscribe(server, { emitter_id: source.id, listener_id: wo }, mallory.key);
  await server.api("POST", "/v1/subscriptions", {
    key: mallory.key,
    body: { emitter_id: "dc_*", listener_id: wm, org_id: org },
  });
  for (const body of [
    { listener_id: wo, event_name: "default" },
    { listener_id: wm, org_id: org, event_name: "default" },
  ]) {
    const rule = await server.api("POST", "/v1/auto_subscriptions", { key: mallory.key, body });
    assert.equal(rule.status, 200, rule.text);
  }
  const own = await subscribe(server, { emitter_id: source.id, listener_id: wm }, mallory.key);
  await emit(source.endpoint, { n: 1 });
  await dispatcher.drain();
  assert.equal(orgReceiver.requests.length, 1);
  const [event] = await entries(server, `/v1/sources/${source.id}`, undefined, mallory.key);
  const eventDeliveries = `/v1/sources/${source.id}/events/${event.id}/deliveries`;
  const before = await server.api("GET", eventDeliveries, { key: mallory.key });
  const toOrg = before.body.data.find((d: any) => d.listener_id === wo);
  assert.ok(toOrg, before.text);
  assert.equal((await server.api("GET", `/v1/deliveries/${toOrg.id}`, { key: mallory.key })).status, 200);

  const left = await server.api("DELETE", `/v1/admin/orgs/${org}/members?user_id=${mallory.id}`);
  assert.equal(left.status, 200, left.text);
  // Only her own route is left, on either side; a source she deploys now is routed to her webhook only.
  const hers = await server.api("GET", "/v1/users/me/subscriptions", { key: mallory.key });
  assert.deepEqual(
    hers.body.data.map((s: any) => s.id),
    [own.id],
  );
  const theirs = await server.api("GET", `/v1/orgs/${org}/subscriptions`, { key: alice.key });
  assert.deepEqual(theirs.body.data, []);
  const later = await deploySource(server, hookSourceCode, mallory.key);
  const after = await server.api("GET", "/v1/users/me/subscriptions", { key: mallory.key });
  assert.deepEqual(
    after.body.data.map((s: any) => s.emitter_id),
    [source.id],
  );
  await emit(source.endpoint, { n: 2 });
  await emit(later.endpoint, { n: 3 });
  await dispatcher.drain();
  assert.equal(orgReceiver.requests.length, 1, "nothing more reached the organization's webhook");
  // The delivery she made to the organization's webhook as a member stays hers, but no longer shows
  // that webhook's URL and answers.
  assertApiError(await server.api("GET", `/v1/deliveries/${toOrg.id}`, { key: mallory.key }), {
    status: 404,
    code: "not_found",
  });
  const listed = await server.api("GET", eventDeliveries, { key: mallory.key });
  assert.deepEqual(
    listed.body.data.map((d: any) => d.listener_id),
    [wm],
  );
  assert.equal(listed.body.page_info.total_count, 1);
});

test("what a member's routes across an organization had not delivered goes when the member leaves, so nothing of it is sent or redelivered later", async () => {
  const alice = await server.createUser(`undelivered-owner-${process.pid}`);
  const mallory = await server.createUser(`undelivered-leaver-${process.pid}`);
  const made = await server.api("POST", "/v1/admin/orgs", {
    body: { orgname: `undelivered-${process.pid}`, owner_id: alice.id },
  });
  assert.equal(made.status, 200, made.text);
  const org = made.body.data.id as string;
  assert.equal(
    (await server.api("POST", `/v1/admin/orgs/${org}/members`, { body: { user_id: mallory.id } })).status,
    200,
  );
  // Her webhook refuses the organization's first event for good (400) and asks for the second again
  // later (500); the organization's webhook asks for hers again later too.
  const herReceiver = await scripted((q) => (q.json?.n === 1 ? 400 : 500));
  const orgReceiver = await scripted(() => 500);
  const orgSource = await server.api("POST", "/v1/sources", {
    key: alice.key,
    body: { component_code: hookSourceCode, org_id: org },
  });
  assert.equal(orgSource.status, 200, orgSource.text);
  const orgHook = await server.api("POST", "/v1/webhooks", {
    key: alice.key,
    body: { url: orgReceiver.url, org_id: org },
  });
  assert.equal(orgHook.status, 200, orgHook.text);
  const wo = orgHook.body.data.id as string;
  const wm = (await createWebhook(server, herReceiver.url, mallory.key)).id;
  const hers = await deploySource(server, hookSourceCode, mallory.key);
  await subscribe(server, { emitter_id: orgSource.body.data.id, listener_id: wm }, mallory.key);
  await subscribe(server, { emitter_id: hers.id, listener_id: wo }, mallory.key);
  // A route of the organization's own, which stays.
  const own = await scripted(() => 500);
  const orgOwn = await server.api("POST", "/v1/webhooks", {
    key: alice.key,
    body: { url: own.url, org_id: org },
  });
  assert.equal(orgOwn.status, 200, orgOwn.text);
  await subscribe(
    server,
    { emitter_id: orgSource.body.data.id, listener_id: orgOwn.body.data.id },
    alice.key,
  );
  await emit(orgSource.body.data.endpoint_url, { n: 1 });
  await emit(orgSource.body.data.endpoint_url, { n: 2 });
  await emit(hers.endpoint, { n: 3 });
  await dispatcher.drain();
  const toHer = await deliveries(server, wm, mallory.key);
  assert.deepEqual(toHer.map((d) => d.status).sort(), ["failed", "pending"]);
  assert.deepEqual(
    (await deliveries(server, wo, alice.key)).map((d) => d.status),
    ["pending"],
  );

  const left = await server.api("DELETE", `/v1/admin/orgs/${org}/members?user_id=${mallory.id}`);
  assert.equal(left.status, 200, left.text);
  assert.deepEqual(
    await deliveries(server, wm, mallory.key),
    [],
    "nothing of the organization's waits for her",
  );
  assert.deepEqual(await deliveries(server, wo, alice.key), [], "nothing of hers waits for the organization");
  for (const d of toHer) {
    assertApiError(await server.api("GET", `/v1/deliveries/${d.id}`, { key: mallory.key }), { status: 404 });
  }
  const redelivered = await server.api("POST", `/v1/webhooks/${wm}/redeliver`, {
    key: mallory.key,
    body: { since: 0 },
  });
  assert.deepEqual(redelivered.body, { data: { count: 0 } }, redelivered.text);
  assert.equal(
    (await deliveries(server, orgOwn.body.data.id, alice.key)).length,
    2,
    "the organization's own route keeps its deliveries",
  );
  const sent = herReceiver.requests.length;
  await dispatcher.drain();
  assert.equal(herReceiver.requests.length, sent);
});
