/**
 * Traces across nodes: two Fount processes on one PostgreSQL schema, both sending spans to a local OTLP
 * receiver. A hit through the node that does not run its source is sent on to the one that does, and the
 * trace goes with it over the node link: the caller's span, the first node's hit span, the second node's
 * hit span, its run and its commit are one trace, each node's spans marked by its `service.instance.id`.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { OtlpReceiver, type ReceivedSpan } from "../tracing/otlp-receiver.ts";
import { type Cluster, deployOwnedBy, eventually, startCluster } from "./nodes.ts";

const sourceCode = `export default {
  name: "Traced",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  async run(event) {
    this.$emit({ got: event.body });
  },
};`;

let otlp: OtlpReceiver;
let cluster: Cluster;
before(async () => {
  otlp = await OtlpReceiver.start();
  // Spans go out within 200 ms of their end rather than the default 5 s.
  cluster = await startCluster(["t1", "t2"], {
    OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
    OTEL_BSP_SCHEDULE_DELAY: "200",
  });
  // A node forwards to the other once its heartbeat has read the other's URL (within a second).
  for (const n of cluster.nodes) {
    await eventually(`${n.name} knows where the other listens`, async () => {
      const metrics = await (await fetch(`${n.url}/metrics`)).text();
      return /^fount_cluster_peers\{[^}]*state="forwardable"[^}]*\} 1$/m.test(metrics) ? true : undefined;
    });
  }
});
after(async () => {
  await cluster?.stop();
  await otlp?.close();
});

test("a hit forwarded to the node that runs its source continues the caller's trace there", async () => {
  const t1 = cluster.node("t1");
  const t2 = cluster.node("t2");
  const { id: sourceId, path } = await deployOwnedBy(t1, "t2", sourceCode);
  const post = async (through: typeof t1, headers: Record<string, string> = {}) => {
    const res = await fetch(`${through.endpoints}${path}`, { method: "POST", headers, body: '{"n":1}' });
    await res.arrayBuffer();
    return res.status;
  };
  // The first hit, through t2, makes t2 (the node the placement names) the node that runs the source: t1 sends the next one there.
  assert.equal(await post(t2), 200);
  const callerTrace = "5bf92f3577b34da6a3ce929d0e0e4736";
  const callerSpan = "10f067aa0ba902b7";
  assert.equal(await post(t1, { traceparent: `00-${callerTrace}-${callerSpan}-01` }), 200);

  const on = (s: ReceivedSpan) => s.resource["service.instance.id"];
  const spans = await otlp.waitFor((all) => {
    const mine = all.filter((s) => s.traceId === callerTrace);
    // Each node sends its spans when they end: wait for both nodes' hit spans and the commit.
    const complete =
      mine.some((s) => s.name === "fount.commit") &&
      mine.some((s) => s.attributes["fount.forwarded"] === true) &&
      mine.some((s) => s.parentSpanId === callerSpan);
    return complete ? mine : undefined;
  });
  const forwarded = spans.find((s) => s.attributes["fount.forwarded"] === true);
  assert.ok(forwarded, `the hit went on to t2: ${otlp.describe()}`);
  assert.equal(on(forwarded), "t2");
  assert.equal(forwarded.attributes["fount.source_id"], sourceId);
  const firstHit = spans.find((s) => s.spanId === forwarded.parentSpanId);
  assert.ok(firstHit, `t2's hit span has t1's as parent: ${otlp.describe()}`);
  assert.equal(on(firstHit), "t1");
  assert.equal(firstHit.parentSpanId, callerSpan, "t1's hit span has the caller's as parent");
  assert.equal(firstHit.name, "POST /e/{endpoint_id}");
  assert.equal(firstHit.attributes["http.response.status_code"], 200);
  const run = spans.find((s) => s.name === "fount.run" && s.parentSpanId === forwarded.spanId);
  assert.ok(run, `the run is the forwarded hit's child: ${otlp.describe()}`);
  assert.equal(on(run), "t2");
  const commit = spans.find((s) => s.name === "fount.commit" && s.parentSpanId === run.spanId);
  assert.ok(commit);
  assert.equal(on(commit), "t2");
});
