/**
 * Three Fount processes on one PostgreSQL schema (issue 16): a source deployed through one node is
 * served and read through every node, a counter stays exact under hits through all three, an SSE
 * stream on one node sees the emits made through the others, timers fire once per tick across a
 * SIGKILL and a restart, a webhook gets every acknowledged emit across a SIGKILL under load, and a
 * deleted source is 404 everywhere at once.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Receiver } from "../delivery/receiver.ts";
import { adminKey } from "../helpers.ts";
import { api, type Cluster, eventually, type Node, startCluster } from "./nodes.ts";

const counterCode = `export default {
  name: "Counter",
  key: "cluster-counter",
  version: "0.0.1",
  type: "source",
  props: { http: { type: "$.interface.http" }, db: "$.service.db" },
  async run(event) {
    const n = (this.db.get("n") ?? 0) + 1;
    this.db.set("n", n);
    this.$emit({ n, k: event.body?.k ?? null }, { id: String(n), summary: "hit " + n });
  },
};`;

const tickerCode = `export default {
  name: "Ticker",
  key: "cluster-ticker",
  version: "0.0.1",
  type: "source",
  props: { timer: { type: "$.interface.timer", default: { intervalSeconds: 1 } } },
  async run(event) {
    this.$emit({ at: event.timestamp }, { summary: "tick " + event.timestamp });
  },
};`;

let cluster: Cluster;
before(async () => {
  cluster = await startCluster(["n1", "n2", "n3"]);
});
after(async () => {
  await cluster?.stop();
});

const node = (name: string): Node => cluster.node(name);

async function deploy(through: Node, code: string, props: Record<string, unknown> = {}) {
  const res = await api(through, "POST", "/v1/sources", { component_code: code, configured_props: props });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.data as { id: string; endpoint_url?: string };
}

async function hit(n: Node, endpointPath: string, body: unknown): Promise<number> {
  const res = await fetch(`${n.endpoints}${endpointPath}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  await res.arrayBuffer();
  return res.status;
}

/** The source's stored events (newest first) through one node, as their `event` bodies. */
async function events(n: Node, sourceId: string): Promise<any[]> {
  const res = await api(n, "GET", `/v1/sources/${sourceId}/event_summaries?limit=100&expand=event`);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.data.map((e: { event: unknown }) => e.event);
}

/** Reads an SSE stream of one node, collecting each frame's event. */
function openStream(n: Node, sourceId: string, lastEventId?: string) {
  const received: any[] = [];
  const controller = new AbortController();
  const opened = fetch(`${n.url}/sources/${sourceId}/sse`, {
    headers: {
      authorization: `Bearer ${adminKey}`,
      ...(lastEventId === undefined ? {} : { "last-event-id": lastEventId }),
    },
    signal: controller.signal,
  }).then(async (res) => {
    assert.equal(res.status, 200);
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let buffered = "";
    void (async () => {
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) return;
          buffered += decoder.decode(value, { stream: true });
          let end = buffered.indexOf("\n\n");
          while (end >= 0) {
            const frame = buffered.slice(0, end);
            buffered = buffered.slice(end + 2);
            const data = frame.split("\n").find((l) => l.startsWith("data: "));
            if (data) received.push(JSON.parse(data.slice(6)).event);
            end = buffered.indexOf("\n\n");
          }
        }
      } catch {
        // aborted
      }
    })();
  });
  return { received, opened, close: () => controller.abort() };
}

function endpointPath(endpoint: string | undefined): string {
  assert.ok(endpoint);
  return new URL(endpoint).pathname;
}

test("a source deployed through one node is served and read through every node", async () => {
  const source = await deploy(node("n1"), counterCode);
  for (const n of cluster.nodes) {
    const res = await api(n, "GET", `/v1/sources/${source.id}`);
    assert.equal(res.status, 200, `${n.name}: ${JSON.stringify(res.body)}`);
    assert.equal(res.body.data.id, source.id);
  }
  for (const n of cluster.nodes)
    assert.equal(await hit(n, endpointPath(source.endpoint_url), { k: n.name }), 200);
  for (const n of cluster.nodes) {
    const stored = await events(n, source.id);
    assert.deepEqual(
      stored.map((e) => e.n),
      [3, 2, 1],
      `${n.name} reads what every node stored`,
    );
  }
});

test("a counter hit 300 times through three nodes at once ends at 300; a stream on one node sees every emit", async () => {
  const source = await deploy(node("n2"), counterCode);
  const stream = openStream(node("n2"), source.id);
  await stream.opened;
  const path = endpointPath(source.endpoint_url);
  const statuses: number[] = [];
  // 100 hits through each node, 5 at a time per node.
  await Promise.all(
    cluster.nodes.flatMap((n) =>
      Array.from({ length: 5 }, async (_, lane) => {
        for (let i = lane; i < 100; i += 5) statuses.push(await hit(n, path, { k: `${n.name}-${i}` }));
      }),
    ),
  );
  assert.equal(statuses.length, 300);
  assert.deepEqual(
    statuses.filter((s) => s !== 200),
    [],
  );
  // Each hit saw the count the previous one left, whichever node ran it: 300 distinct counts, in order.
  const stored = await events(node("n3"), source.id);
  assert.deepEqual(
    stored.map((e) => e.n),
    Array.from({ length: 100 }, (_, i) => 300 - i),
  );
  await eventually("the stream on n2 got all 300 emits", async () =>
    stream.received.length >= 300 ? true : undefined,
  );
  stream.close();
  assert.deepEqual(
    stream.received.map((e) => e.n),
    Array.from({ length: 300 }, (_, i) => i + 1),
    "in order, none missing or twice",
  );
  const fromOthers = stream.received.filter((e) => !e.k.startsWith("n2-")).length;
  assert.equal(fromOthers, 200, "the emits made through n1 and n3 all reached n2's stream");

  // A stream resumed on another node with Last-Event-ID replays what followed, from the store.
  const summaries = await api(node("n1"), "GET", `/v1/sources/${source.id}/event_summaries?limit=10`);
  const tenth = summaries.body.data.at(-1) as { id: string };
  const resumed = openStream(node("n3"), source.id, tenth.id);
  await resumed.opened;
  await eventually("the resumed stream replayed 9 events", async () =>
    resumed.received.length >= 9 ? true : undefined,
  );
  resumed.close();
  assert.deepEqual(
    resumed.received.map((e) => e.n),
    [292, 293, 294, 295, 296, 297, 298, 299, 300],
  );
});

test("1 s timer ticks fire once each across a SIGKILL of a node and its restart, and resume within 10 s", async () => {
  const ticker = await deploy(node("n1"), tickerCode, { timer: { intervalSeconds: 1 } });
  const ticks = async () => (await events(node("n3"), ticker.id)).map((e) => e.at as number);
  await eventually("three ticks", async () => ((await ticks()).length >= 3 ? true : undefined));
  await node("n1").proc.kill();
  const killedAt = Date.now();
  const before = (await ticks())[0]!;
  // The killed node's run lease and claims are free once its heartbeat is 5 s old.
  const resumedAt = await eventually(
    "a tick after the kill",
    async () => ((await ticks()).some((t) => t > before + 1) ? Date.now() : undefined),
    20_000,
  );
  const gapMs = resumedAt - killedAt;
  console.log(`# timer: first tick after SIGKILL ${gapMs} ms after it`);
  assert.ok(gapMs <= 10_000, `ticks resumed ${gapMs} ms after the kill`);
  await cluster.start("n1");
  await new Promise((r) => setTimeout(r, 4_000));
  const all = await ticks();
  assert.deepEqual(
    all.filter((t, i) => all.indexOf(t) !== i),
    [],
    "no tick fired twice",
  );
  // Every second fired, but for ticks skipped because the previous run still ran (each noted on $logs)
  // and those that fell due while the dead node still counted as alive (its heartbeat is trusted for
  // 5 s): they fire once, together, at the takeover.
  const logs = await api(
    node("n3"),
    "GET",
    `/v1/sources/${ticker.id}/event_summaries?event_name=$logs&limit=100&expand=event`,
  );
  const skipped = new Set<number>();
  for (const e of logs.body.data as Array<{ event: { message?: string } }>) {
    const iso = /Timer tick of (\S+) skipped/.exec(e.event.message ?? "")?.[1];
    if (iso) skipped.add(Math.floor(Date.parse(iso) / 1000));
  }
  const sorted = [...all].sort((a, b) => a - b);
  const unexplained: number[] = [];
  for (let t = sorted[0]!; t <= sorted.at(-1)!; t++)
    if (!all.includes(t) && !skipped.has(t)) unexplained.push(t);
  const runs = unexplained.filter((t, i) => i === 0 || t - unexplained[i - 1]! > 1).length;
  console.log(
    `# timer: ${sorted.length} ticks, ${skipped.size} skipped on $logs, not fired: ${unexplained.join(",")}`,
  );
  assert.ok(
    runs <= 1,
    `one stretch without ticks at most, at the takeover: ${sorted.join(",")}; skipped ${[...skipped]}`,
  );
  await api(node("n2"), "DELETE", `/v1/sources/${ticker.id}`);
});

test("a webhook gets every acknowledged emit at least once across a SIGKILL of a node under load", async () => {
  const receiver = await Receiver.start();
  try {
    const source = await deploy(node("n1"), counterCode);
    const hook = await api(node("n1"), "POST", "/v1/webhooks", { url: receiver.url });
    assert.equal(hook.status, 200, JSON.stringify(hook.body));
    const sub = await api(
      node("n1"),
      "POST",
      `/v1/subscriptions?emitter_id=${source.id}&listener_id=${hook.body.data.id}`,
    );
    assert.ok(sub.status < 300, JSON.stringify(sub.body));
    const path = endpointPath(source.endpoint_url);
    for (const n of cluster.nodes) assert.equal(await hit(n, path, { k: `${n.name}-warm` }), 200);
    const acknowledged: string[] = [`n1-warm`, `n2-warm`, `n3-warm`];
    let stop = false;
    // Three lanes of sequential hits through each node.
    const load = cluster.nodes.flatMap((n) =>
      [0, 1, 2].map(async (lane) => {
        for (let i = 0; !stop; i++) {
          const k = `${n.name}-${lane}-${i}`;
          try {
            if ((await hit(n, path, { k })) === 200) acknowledged.push(k);
          } catch {
            // The killed node's connections fail: those hits were never acknowledged.
            if (n.name === "n2") return;
          }
        }
      }),
    );
    await new Promise((r) => setTimeout(r, 3_000));
    await node("n2").proc.kill();
    // Long enough for the others to take over the sources the dead node held (5 s).
    await new Promise((r) => setTimeout(r, 8_000));
    stop = true;
    await Promise.all(load);
    const got = () => receiver.requests.map((r) => r.json?.event?.k ?? r.json?.k).filter(Boolean);
    await eventually(
      "every acknowledged emit delivered",
      async () => {
        const seen = new Set(got());
        return acknowledged.every((k) => seen.has(k)) ? true : undefined;
      },
      60_000,
    );
    const all = got();
    const duplicates = all.length - new Set(all).size;
    console.log(
      `# webhook: ${acknowledged.length} acknowledged, ${all.length} received, ${duplicates} duplicates`,
    );
    assert.ok(acknowledged.length > 3, `hits beyond the warm-up were acknowledged: ${acknowledged.length}`);
  } finally {
    await receiver.close();
    await cluster.start("n2");
  }
});

test("a source deleted through one node is 404 on every node within 1 s, and its streams end", async () => {
  const source = await deploy(node("n1"), counterCode);
  const path = endpointPath(source.endpoint_url);
  for (const n of cluster.nodes) assert.equal(await hit(n, path, {}), 200);
  const res = await api(node("n3"), "DELETE", `/v1/sources/${source.id}`);
  assert.ok(res.status < 300, JSON.stringify(res.body));
  const deletedAt = Date.now();
  for (const n of cluster.nodes) {
    await eventually(
      `${n.name} answers 404`,
      async () => {
        const [a, e] = [await api(n, "GET", `/v1/sources/${source.id}`), await hit(n, path, {})];
        return a.status === 404 && e === 404 ? true : undefined;
      },
      1_000,
    );
  }
  console.log(`# delete: 404 on all three nodes after ${Date.now() - deletedAt} ms`);
});
