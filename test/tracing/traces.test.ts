/**
 * Traces, end to end in one process: with the SDK set up as main.ts sets it up (an OTLP endpoint in the
 * environment), an endpoint hit that names a parent in `traceparent` makes one trace of the hit, its run,
 * its commit and the webhook delivery's attempts, exported to a local OTLP receiver; the webhook receiver
 * gets the attempt's span as `traceparent`. Then, with the SDK stopped, nothing is exported and no
 * header is added.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { readVersion } from "../../src/cli/version.ts";
import { tracing } from "../../src/tracing.ts";
import { startTracing, type TracingHandle } from "../../src/tracing-sdk.ts";
import {
  createWebhook,
  deploySource,
  hookSourceCode,
  Receiver,
  relaySourceCode,
  subscribe,
} from "../delivery/receiver.ts";
import { startServer, type TestServer } from "../helpers.ts";
import { OtlpReceiver, type ReceivedSpan } from "./otlp-receiver.ts";

/** OTLP's span kinds. */
const kind = { internal: 1, server: 2, client: 3 };

let otlp: OtlpReceiver;
let traces: TracingHandle;
let server: TestServer;
let hooks: Receiver;
const warnings: string[] = [];

before(async () => {
  otlp = await OtlpReceiver.start();
  process.env.OTEL_EXPORTER_OTLP_ENDPOINT = otlp.url;
  process.env.OTEL_SERVICE_NAME = "fount-under-test";
  traces = startTracing({
    nodeId: "node-a",
    version: readVersion(),
    log: { warn: (_obj, msg) => warnings.push(msg) },
  });
  server = await startServer({ webhookAllowPrivate: true });
  hooks = await Receiver.start();
});

after(async () => {
  await server?.close();
  await traces?.stop();
  await hooks?.close();
  await otlp?.close();
  delete process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
  delete process.env.OTEL_SERVICE_NAME;
});

/** The spans of one trace, once `count` of them arrived. */
async function traceOf(traceId: string, count: number): Promise<ReceivedSpan[]> {
  await traces.flush();
  return otlp.waitFor((spans) => {
    const mine = spans.filter((s) => s.traceId === traceId);
    return mine.length >= count ? mine : undefined;
  });
}

function one(spans: ReceivedSpan[], name: string, parent?: ReceivedSpan): ReceivedSpan {
  const found = spans.filter((s) => s.name === name && (!parent || s.parentSpanId === parent.spanId));
  assert.equal(
    found.length,
    1,
    `one ${name} span${parent ? ` under ${parent.name}` : ""}: ${otlp.describe()}`,
  );
  return found[0]!;
}

test("a hit's trace runs from the caller's traceparent through the run, the commit and the delivery's attempts, and the webhook gets the attempt's traceparent", async () => {
  const source = await deploySource(server, hookSourceCode);
  const hook = await createWebhook(server, hooks.url);
  await subscribe(server, { emitter_id: source.id, listener_id: hook.id });
  // The first attempt fails: the retry, a second later, is a second attempt span under the same commit.
  hooks.answer = (_r, n) => (n === 0 ? { status: 503, headers: { "retry-after": "1" } } : 200);

  const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736";
  const callerSpan = "00f067aa0ba902b7";
  const res = await fetch(`${source.endpoint}/orders?token=secret`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      traceparent: `00-${callerTrace}-${callerSpan}-01`,
      tracestate: "caller=1",
    },
    body: JSON.stringify({ order: 7 }),
  });
  assert.equal(res.status, 200);
  await res.arrayBuffer();
  const deadline = Date.now() + 60_000;
  while (hooks.requests.length < 2 && Date.now() < deadline) {
    await server.built.services.dispatcher.drain();
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(hooks.requests.length, 2, "delivered on the second attempt");

  const spans = await traceOf(callerTrace, 5);
  const hit = one(spans, "POST /e/{endpoint_id}");
  assert.equal(hit.parentSpanId, callerSpan, "the caller's span is the hit's parent");
  assert.equal(hit.kind, kind.server);
  assert.equal(hit.attributes["http.request.method"], "POST");
  assert.equal(hit.attributes["http.route"], "/e/{endpoint_id}");
  assert.match(String(hit.attributes["url.path"]), /^\/e\/[a-z0-9]+\/orders$/, "no query string");
  assert.equal(hit.attributes["http.response.status_code"], 200);
  assert.equal(hit.attributes["fount.source_id"], source.id);
  assert.equal(hit.resource["service.name"], "fount-under-test");
  assert.equal(hit.resource["service.instance.id"], "node-a");

  const run = one(spans, "fount.run", hit);
  assert.equal(run.attributes["fount.source_id"], source.id);
  assert.equal(run.attributes["fount.trigger"], "http");
  const commit = one(spans, "fount.commit", run);
  const attempts = spans
    .filter((s) => s.name === "POST" && s.parentSpanId === commit.spanId)
    .sort((a, b) => Number(a.attributes["fount.attempt"]) - Number(b.attributes["fount.attempt"]));
  assert.equal(attempts.length, 2, `two attempt spans under the commit: ${otlp.describe()}`);
  const [first, second] = attempts as [ReceivedSpan, ReceivedSpan];
  assert.equal(first.kind, kind.client);
  assert.equal(first.attributes["url.full"], hooks.url);
  assert.equal(first.attributes["server.address"], "127.0.0.1");
  assert.equal(first.attributes["http.response.status_code"], 503);
  assert.equal(first.attributes["error.type"], "503");
  assert.equal(first.status, 2, "a failed attempt's span is an error");
  assert.equal(second.attributes["fount.attempt"], 2);
  assert.equal(second.attributes["http.request.resend_count"], 1);
  assert.equal(second.attributes["http.response.status_code"], 200);
  const deliveryId = String(hooks.requests[0]!.headers["webhook-id"]);
  assert.equal(first.attributes["fount.delivery_id"], deliveryId);
  assert.equal(first.attributes["fount.event_id"], hooks.requests[0]!.headers["x-fount-event-id"]);
  assert.deepEqual(commit.attributes["fount.event_ids"], [first.attributes["fount.event_id"]]);

  // Each webhook request names its own attempt's span as parent, with the caller's tracestate.
  assert.equal(hooks.requests[0]!.headers.traceparent, `00-${callerTrace}-${first.spanId}-01`);
  assert.equal(hooks.requests[1]!.headers.traceparent, `00-${callerTrace}-${second.spanId}-01`);
  assert.equal(hooks.requests[0]!.headers.tracestate, "caller=1");
  assert.deepEqual(warnings, []);
});

test("a delivery to a listener source continues the trace: its attempt's span is the parent of the listener's run", async () => {
  const emitter = await deploySource(server, hookSourceCode);
  const relay = await deploySource(server, relaySourceCode);
  await subscribe(server, { emitter_id: emitter.id, listener_id: relay.id });
  const res = await fetch(emitter.endpoint, { method: "POST", body: "{}" });
  assert.equal(res.status, 200);
  await res.arrayBuffer();
  await server.built.services.dispatcher.drain();
  await traces.flush();
  const hit = await otlp.waitFor((spans) =>
    spans.find((s) => s.name === "POST /e/{endpoint_id}" && s.attributes["fount.source_id"] === emitter.id),
  );
  const spans = await traceOf(hit.traceId, 6);
  assert.equal(hit.parentSpanId, "", "a hit without traceparent starts a trace");
  const commit = one(spans, "fount.commit", one(spans, "fount.run", hit));
  const deliver = one(spans, "fount.deliver", commit);
  assert.equal(deliver.attributes["fount.listener_id"], relay.id);
  const listenerRun = one(spans, "fount.run", deliver);
  assert.equal(listenerRun.attributes["fount.trigger"], "subscription");
  assert.equal(listenerRun.attributes["fount.source_id"], relay.id);
  one(spans, "fount.commit", listenerRun);
});

test("a run that throws is an error span with its code, never the thrown text, which may quote a secret", async () => {
  const thrower = await deploySource(
    server,
    `export default { name: "thrower", version: "1", props: { http: "$.interface.http" },
      async run() { throw new Error("upstream said: token=sk_live_do_not_export"); } }`,
  );
  const res = await fetch(thrower.endpoint, { method: "POST", body: "{}" });
  await res.arrayBuffer();
  await traces.flush();
  const run = await otlp.waitFor((spans) =>
    spans.find((s) => s.name === "fount.run" && s.attributes["fount.source_id"] === thrower.id),
  );
  assert.equal(run.status, 2);
  assert.equal(typeof run.attributes["error.type"], "string");
  assert.equal(run.statusMessage, "");
  assert.doesNotMatch(JSON.stringify(otlp.spans), /sk_live_do_not_export/);
});

test("with traces off, nothing is exported and no delivery carries a traceparent", async () => {
  const source = await deploySource(server, hookSourceCode);
  const hook = await createWebhook(server, hooks.url);
  await subscribe(server, { emitter_id: source.id, listener_id: hook.id });
  await traces.stop();
  assert.equal(tracing.on, false);
  const exported = otlp.spans.length;
  hooks.requests.length = 0;
  hooks.answer = () => 200;
  const res = await fetch(source.endpoint, {
    method: "POST",
    headers: { traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" },
    body: "{}",
  });
  assert.equal(res.status, 200);
  await res.arrayBuffer();
  await server.built.services.dispatcher.drain();
  assert.equal(hooks.requests.length, 1);
  assert.equal(hooks.requests[0]!.headers.traceparent, undefined);
  assert.equal(hooks.requests[0]!.headers.tracestate, undefined);
  const [d] = (await server.api("GET", `/v1/webhooks/${hook.id}/deliveries`)).body.data;
  const stored = await server.built.services.store.getDelivery(d.id);
  assert.equal(stored?.trace, undefined, "no trace kept with the delivery");
  assert.equal(otlp.spans.length, exported);
});
