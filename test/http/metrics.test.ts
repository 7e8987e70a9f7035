/**
 * `GET /metrics` as Prometheus scrapes it: the text format with every family Fount documents, labelled
 * by node, and figures that move when the server works (endpoint hits, invocations, stored events, a
 * webhook delivery, a timer tick, an open SSE stream). FOUNT_METRICS_TOKEN, FOUNT_METRICS=false, and
 * FOUNT_METRICS_PORT, which moves the endpoint off the API's port.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Receiver } from "../delivery/receiver.ts";
import { deploy, fixture, hit } from "../fixtures/components/fixtures.ts";
import { adminKey, freePort, startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
let receiver: Receiver;

before(async () => {
  server = await startServer({ webhookAllowPrivate: true }, { FOUNT_NODE_ID: "node-a" });
  receiver = await Receiver.start();
});
after(async () => {
  await receiver.close();
  await server.close();
});

async function scrape(target = server, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${target.url}/metrics`, { headers });
}

/** The value of one sample (`name{labels}` as printed, labels in any order), or undefined. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split("\n")) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    const open = line.indexOf("{");
    const close = line.lastIndexOf("}");
    const given = open === -1 ? "" : line.slice(open + 1, close);
    if (!Object.entries(labels).every(([k, v]) => given.includes(`${k}="${v}"`))) continue;
    return Number(line.slice(close + 1).trim());
  }
  return undefined;
}

/** Scrapes until `check` holds (work settles in its own time), failing with the last text after a while. */
async function until(check: (text: string) => boolean, what: string): Promise<string> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const text = await (await scrape()).text();
    if (check(text)) return text;
    if (Date.now() > deadline) assert.fail(`metrics never showed ${what}:\n${text.slice(0, 4000)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

test("the text format has every family, each series labelled with the node", async () => {
  const res = await scrape();
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type") ?? "", /^text\/plain; version=0\.0\.4/);
  const text = await res.text();
  for (const family of [
    "fount_http_requests_total",
    "fount_http_request_duration_seconds",
    "fount_endpoint_hits_total",
    "fount_endpoint_forwards_total",
    "fount_invocations_total",
    "fount_invocation_duration_seconds",
    "fount_events_stored_total",
    "fount_deliveries_total",
    "fount_delivery_attempt_duration_seconds",
    "fount_delivery_latency_seconds",
    "fount_delivery_backlog",
    "fount_timer_ticks_total",
    "fount_timer_lateness_seconds",
    "fount_executors_running",
    "fount_executor_spares",
    "fount_executors_memory_bytes",
    "fount_sse_clients",
    "fount_source_db_cache_bytes",
    "fount_store_commit_duration_seconds",
    "fount_store_up",
    "fount_destination_state_changes_total",
    "fount_destinations_failing",
    "fount_process_resident_memory_bytes",
  ]) {
    assert.match(text, new RegExp(`^# TYPE ${family} `, "m"), family);
  }
  assert.equal(sample(text, "fount_delivery_backlog", { node: "node-a", state: "pending" }), 0);
  assert.equal(sample(text, "fount_store_up", { node: "node-a" }), 1);
});

test("the figures move as the server works", async () => {
  const before = await (await scrape()).text();
  const hits0 = sample(before, "fount_endpoint_hits_total", { status: "200" }) ?? 0;
  const emits0 = sample(before, "fount_events_stored_total", { kind: "emit" }) ?? 0;

  const source = await deploy(server, { component_code: fixture("http-echo.mjs") });
  const hook = await server.api("POST", "/v1/webhooks", { body: { url: receiver.url } });
  assert.equal(hook.status, 200, hook.text);
  const sub = await server.api("POST", "/v1/subscriptions", {
    body: { emitter_id: source.id, listener_id: hook.body.data.id },
  });
  assert.equal(sub.status, 200, sub.text);
  for (let i = 0; i < 3; i++) {
    const res = await hit(source.configured_props.http.endpoint_url, { method: "POST", body: `{"n":${i}}` });
    assert.equal(res.status, 200, res.text);
  }
  const timer = await deploy(server, {
    component_code: fixture("ticker.mjs"),
    configured_props: { timer: { intervalSeconds: 1 } },
  });
  assert.ok(timer.id);
  // An open live stream, read until the scrape has counted it.
  const stream = new AbortController();
  const sse = await fetch(`${server.url}/sources/${source.id}/sse`, {
    headers: { authorization: `Bearer ${server.built.services.config.bootstrapApiKey}` },
    signal: stream.signal,
  });
  assert.equal(sse.status, 200);
  try {
    const text = await until(
      (t) =>
        (sample(t, "fount_deliveries_total", { kind: "webhook", outcome: "succeeded" }) ?? 0) >= 3 &&
        (sample(t, "fount_timer_ticks_total", { result: "fired" }) ?? 0) >= 1 &&
        // A tick counts as fired when claimed; its emit is stored once its run commits.
        (sample(t, "fount_events_stored_total", { kind: "emit" }) ?? 0) >= emits0 + 4 &&
        sample(t, "fount_sse_clients") === 1,
      "3 deliveries, a timer tick's emit and the SSE client",
    );
    assert.ok((sample(text, "fount_endpoint_hits_total", { status: "200" }) ?? 0) >= hits0 + 3);
    assert.ok((sample(text, "fount_events_stored_total", { kind: "emit" }) ?? 0) >= emits0 + 4);
    assert.ok((sample(text, "fount_invocations_total", { trigger: "http", outcome: "ok" }) ?? 0) >= 3);
    assert.ok((sample(text, "fount_invocation_duration_seconds_count", { trigger: "http" }) ?? 0) >= 3);
    assert.ok((sample(text, "fount_delivery_latency_seconds_count", { kind: "webhook" }) ?? 0) >= 3);
    assert.ok((sample(text, "fount_delivery_attempt_duration_seconds_count", { kind: "webhook" }) ?? 0) >= 3);
    assert.ok((sample(text, "fount_timer_lateness_seconds_count") ?? 0) >= 1);
    assert.ok((sample(text, "fount_store_commit_duration_seconds_count") ?? 0) > 0);
    assert.ok((sample(text, "fount_executors_running") ?? 0) >= 1);
    assert.ok((sample(text, "fount_executors_memory_bytes") ?? 0) > 1e6, "executors use some memory");
    assert.ok(
      (sample(text, "fount_http_requests_total", { method: "POST", route: "/v1/sources", status: "200" }) ??
        0) >= 2,
      "requests are counted by route pattern",
    );
    assert.equal(sample(text, "fount_http_requests_total", { route: `/v1/sources/${source.id}` }), undefined);
  } finally {
    stream.abort();
  }
  await until((t) => sample(t, "fount_sse_clients") === 0, "the SSE client gone");
});

test("FOUNT_METRICS_TOKEN asks for a bearer token; FOUNT_METRICS=false serves no metrics", async () => {
  const guarded = await startServer({}, { FOUNT_METRICS_TOKEN: "s3cret-token" });
  const off = await startServer({}, { FOUNT_METRICS: "false" });
  try {
    const refused = await scrape(guarded);
    assert.equal(refused.status, 401);
    assert.equal(((await refused.json()) as { code: string }).code, "unauthorized");
    for (const authorization of [
      "Bearer wrong-token!",
      "Bearer s3cret-tokem",
      "Bearer s3cret",
      "s3cret-token",
    ]) {
      assert.equal((await scrape(guarded, { authorization })).status, 401, authorization);
    }
    // An API key is not the metrics token.
    assert.equal((await scrape(guarded, { authorization: `Bearer ${adminKey}` })).status, 401);
    const ok = await scrape(guarded, { authorization: "Bearer s3cret-token" });
    assert.equal(ok.status, 200);
    assert.match(await ok.text(), /^# TYPE fount_endpoint_hits_total counter/m);
    // The scheme is case-insensitive (RFC 9110), as some scrapers send it.
    assert.equal((await scrape(guarded, { authorization: "bearer s3cret-token" })).status, 200);
    assert.equal((await scrape(off)).status, 404);
  } finally {
    await Promise.all([guarded.close(), off.close()]);
  }
});

test("FOUNT_METRICS_PORT serves /metrics on a listener of its own, and the API's port no longer does", async () => {
  const port = await freePort();
  const apart = await startServer(
    {},
    { FOUNT_METRICS_PORT: String(port), FOUNT_METRICS_HOST: "127.0.0.1", FOUNT_METRICS_TOKEN: "tok" },
  );
  const metricsUrl = `http://127.0.0.1:${port}`;
  try {
    assert.equal((await scrape(apart, { authorization: "Bearer tok" })).status, 404);
    const refused = await fetch(`${metricsUrl}/metrics`);
    assert.equal(refused.status, 401);
    assert.equal(((await refused.json()) as { code: string }).code, "unauthorized");
    const ok = await fetch(`${metricsUrl}/metrics?x=1`, { headers: { authorization: "Bearer tok" } });
    assert.equal(ok.status, 200);
    assert.match(ok.headers.get("content-type") ?? "", /^text\/plain/);
    assert.match(await ok.text(), /^# TYPE fount_http_requests_total counter/m);
    // Nothing else is served there: not the API, not the console.
    for (const path of ["/v1/users/me", "/", "/healthz"]) {
      const other = await fetch(metricsUrl + path, { headers: { authorization: `Bearer ${adminKey}` } });
      assert.equal(other.status, 404, path);
      assert.equal(((await other.json()) as { code: string }).code, "not_found");
    }
    assert.equal((await fetch(`${metricsUrl}/metrics`, { method: "POST" })).status, 405);
  } finally {
    await apart.close();
  }
  // It stops with the server.
  await assert.rejects(fetch(`${metricsUrl}/metrics`));
});
