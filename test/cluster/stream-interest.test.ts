/**
 * Events travel between nodes only where a stream waits for them (src/domain/cluster/cluster-link.ts): two real
 * ClusterLinks on one PostgreSQL schema stand for two nodes; the events a node stores are what its bus
 * says, and what the other's streams would get is what its bus hears as `event.replicated`. Other test
 * files run clusters on other schemas of the same database at the same time: they must not be heard.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import type { FastifyBaseLogger } from "fastify";
import pino from "pino";
import { Bus } from "../../src/domain/bus.ts";
import { ClusterLink } from "../../src/domain/cluster/cluster-link.ts";
import type { InterestTimings } from "../../src/domain/cluster/cluster-messages.ts";
import type { EventRecord } from "../../src/domain/types.ts";
import type { Storage } from "../../src/storage/port.ts";
import { schemaChannel } from "../../src/storage/postgres/cluster.ts";
import { openTestPostgres } from "../pg-schemas.ts";

const silent = pino({ level: "silent" }) as unknown as FastifyBaseLogger;

interface Node {
  link: ClusterLink;
  bus: Bus;
  /** Events heard from the other node, in order. */
  heard: EventRecord[];
}

async function node(
  store: Storage,
  name: string,
  interest: Partial<InterestTimings>,
  heartbeatMs?: number,
): Promise<Node> {
  const bus = new Bus();
  const heard: EventRecord[] = [];
  bus.on("event.replicated", (e) => heard.push(e));
  const link = new ClusterLink({
    store,
    cluster: store.cluster!,
    nodeId: `${name}/${process.pid}`,
    bus,
    logger: silent,
    onLeaseMessage: () => undefined,
    onDeleted: () => undefined,
    interest,
    heartbeatMs,
  });
  await link.start();
  after(() => link.close());
  return { link, bus, heard };
}

let seq = 0;
function event(emitterId: string): EventRecord {
  const ms = Date.now();
  seq++;
  return {
    emitterId,
    channel: "",
    id: `${ms}-${seq}`,
    idMs: ms,
    idSeq: seq,
    indexedAtMs: ms,
    event: { seq },
    meta: { emit_id: `emit${seq}`, name: "", emitter_id: emitterId, id: String(seq), ts: ms },
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(what: string, check: () => boolean, boundMs = 20_000): Promise<void> {
  const start = Date.now();
  while (!check()) {
    assert.ok(Date.now() - start < boundMs, `${what} within ${boundMs} ms`);
    await sleep(10);
  }
}

/** Two nodes on one fresh schema that see each other (a heartbeat each way). */
async function twoNodes(interest: Partial<InterestTimings>): Promise<[Node, Node]> {
  const store = await openTestPostgres();
  after(() => store.close());
  const a = await node(store, "a", interest);
  const b = await node(store, "b", interest);
  await until("each node sees the other", () => a.link.peers === 1 && b.link.peers === 1);
  return [a, b];
}

/** Resolves `p`, or fails after `ms` (a confirmation that never came would wait for the long timeout). */
async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} not within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

test("a node counts one that started after it as soon as that one speaks, not at its own next heartbeat", async () => {
  const store = await openTestPostgres();
  after(() => store.close());
  // a's own heartbeat comes once a minute: only b's first message can tell it b is there.
  const a = await node(store, "a", {}, 60_000);
  assert.equal(a.link.peers, 0);
  const b = await node(store, "b", {});
  assert.equal(b.link.peers, 1, "b read the live nodes as it started");
  await until("a counts b", () => a.link.peers === 1, 10_000);
  // And so sends b what it stores: a stream on b just after b started missed those events before.
  a.bus.emit("event.stored", event("dc_early"));
  await until("b hears a's event", () => b.heard.some((e) => e.emitterId === "dc_early"), 10_000);
});

test("a node sends another only the events of the emitters its streams watch, from when the stream is ready", async () => {
  // Announcements last 1.5 s and are repeated every 0.3 s; confirmations are waited for a minute, so a
  // stream that goes live at once was confirmed, not timed out.
  const [a, b] = await twoNodes({ ttlMs: 1_500, refreshMs: 300, ackTimeoutMs: 60_000 });
  // Past the window in which a newly listening node sends everything.
  await sleep(1_700);

  const marker = b.link.watch("dc_marker");
  await within(marker.ready, 10_000, "the other node's confirmation");
  const watched = b.link.watch("dc_watched");
  await within(watched.ready, 10_000, "the other node's confirmation");

  // One turn of a's event loop: the three go out in one message, if at all.
  const unwatched = event("dc_unwatched");
  a.bus.emit("event.stored", unwatched);
  a.bus.emit("event.stored", event("dc_watched"));
  a.bus.emit("event.stored", event("dc_marker"));
  await until("b hears the marker", () => b.heard.some((e) => e.emitterId === "dc_marker"));
  assert.deepEqual(
    b.heard.map((e) => e.emitterId),
    ["dc_watched", "dc_marker"],
    "the unwatched emitter's event stayed on a",
  );

  // Announcements outlive no stream: a forgets the released emitter after its TTL.
  watched.release();
  // A second stream of the same emitter on b is ready at once, and its release is its own.
  const again = b.link.watch("dc_marker");
  await within(again.ready, 100, "an already announced emitter");
  again.release();
  await sleep(2_500);
  b.heard.length = 0;
  a.bus.emit("event.stored", event("dc_watched"));
  a.bus.emit("event.stored", event("dc_marker"));
  await until("b hears the marker", () => b.heard.some((e) => e.emitterId === "dc_marker"));
  assert.deepEqual(
    b.heard.map((e) => e.emitterId),
    ["dc_marker"],
    "a stopped sending the released emitter, and kept sending the one still streamed",
  );
  marker.release();
});

test("a node that has just started sends every event, until the others' announcements have reached it", async () => {
  const [a, b] = await twoNodes({ ttlMs: 60_000, refreshMs: 300, ackTimeoutMs: 60_000 });
  a.bus.emit("event.stored", event("dc_nobody_watches"));
  await until("b hears it", () => b.heard.length === 1);
  assert.equal(b.heard[0]!.emitterId, "dc_nobody_watches");
});

test("without other nodes a stream is ready at once and nothing is sent", async () => {
  const store = await openTestPostgres();
  after(() => store.close());
  const alone = await node(store, "alone", { ackTimeoutMs: 60_000 });
  assert.equal(alone.link.peers, 0);
  const w = alone.link.watch("dc_x");
  await within(w.ready, 100, "a stream of a node alone");
  w.release();
});

test("clusters on two schemas of one database never hear each other", async () => {
  const timings = { ttlMs: 60_000, refreshMs: 300, ackTimeoutMs: 60_000 };
  const [a1, a2] = await twoNodes(timings);
  const [b1, b2] = await twoNodes(timings);
  // Both clusters are in the window in which every event is sent to the cluster's other node.
  a1.bus.emit("event.stored", event("dc_of_cluster_a"));
  await until("a2 hears a1", () => a2.heard.length === 1);
  // Sent after a1's: on a shared channel b2 would hear a1's event first.
  b1.bus.emit("event.stored", event("dc_of_cluster_b"));
  await until("b2 hears b1", () => b2.heard.length > 0);
  assert.deepEqual(
    b2.heard.map((e) => e.emitterId),
    ["dc_of_cluster_b"],
  );
  assert.deepEqual(
    a2.heard.map((e) => e.emitterId),
    ["dc_of_cluster_a"],
  );
});

test("a channel's name carries its schema, hashed when the name would pass PostgreSQL's 63 bytes", () => {
  assert.equal(schemaChannel("fount_cluster", "tenant_a"), "fount_cluster:tenant_a");
  const long = schemaChannel("fount_cluster", "s".repeat(80));
  assert.equal(Buffer.byteLength(long), 63);
  assert.notEqual(long, schemaChannel("fount_cluster", `${"s".repeat(79)}t`));
});
