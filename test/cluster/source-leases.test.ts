/**
 * The run lease of a source wanted by several nodes (src/domain/cluster/source-leases.ts): three real cluster
 * nodes (ClusterLink and SourceLeases, as the server wires them) on one fresh PostgreSQL schema, their
 * lease messages over the real cluster channel, which the test also listens to. A release names the
 * first node that asked, and the others ask that node in turn, so the lease goes round every node that
 * wants it; a request that reaches a node while it is still taking the lease is kept; and a node that
 * gives the lease away sends the invocations that may run anywhere after it, and leaves the free row to
 * the node it gave it to.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import type { FastifyBaseLogger } from "fastify";
import pino from "pino";
import { Bus } from "../../src/domain/bus.ts";
import { type ClusterNode, clusterNode } from "../../src/domain/cluster/cluster-link.ts";
import { LeaseMoved } from "../../src/domain/cluster/source-leases.ts";
import { EventRecorder } from "../../src/domain/events/recorder.ts";
import type { ClusterStore, Storage } from "../../src/storage/port.ts";
import { openTestPostgres } from "../pg-schemas.ts";
import { eventually } from "./nodes.ts";

const silent = pino({ level: "silent" }) as unknown as FastifyBaseLogger;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Waits until `check()` holds (test/cluster/nodes.ts, `eventually`). */
const until = (what: string, check: () => boolean) =>
  eventually(what, async () => (check() ? true : undefined));

interface Message {
  n: string;
  t: string;
  s?: string;
  to?: string;
}

/** `cluster` with its calls to take and give back lease rows noted in `calls`, when they are made. */
function recorded(cluster: ClusterStore, calls: RowCall[]): ClusterStore {
  return new Proxy(cluster, {
    get(target, prop) {
      if (prop === "acquireSourceLease")
        return (source: string, node: string, deadAfterMs: number) => {
          calls.push({ op: "acquire", source, node, at: Date.now() });
          return target.acquireSourceLease(source, node, deadAfterMs);
        };
      if (prop === "releaseSourceLease")
        return (source: string, node: string, gen: number) => {
          calls.push({ op: "release", source, node, at: Date.now() });
          return target.releaseSourceLease(source, node, gen);
        };
      const value = Reflect.get(target, prop);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

/** A node's calls to take or give back a lease row, with when each was made (`Date.now()`). */
interface RowCall {
  op: "acquire" | "release";
  source: string;
  node: string;
  at: number;
}

/** Three nodes on one fresh schema that see each other, every message on their channel, and their row calls. */
async function threeNodes(): Promise<{
  nodes: Array<ClusterNode & { id: string }>;
  heard: Message[];
  rowCalls: RowCall[];
}> {
  const store: Storage = await openTestPostgres();
  after(() => store.close());
  const heard: Message[] = [];
  const rowCalls: RowCall[] = [];
  const unlisten = await store.cluster!.listen("fount_cluster", (payload) => {
    heard.push(JSON.parse(payload) as Message);
  });
  after(unlisten);
  const nodes: Array<ClusterNode & { id: string }> = [];
  for (const name of ["a", "b", "c"]) {
    const id = `${name}/${process.pid}`;
    const node = clusterNode({
      store,
      cluster: recorded(store.cluster!, rowCalls),
      nodeId: id,
      bus: new Bus(),
      recorder: new EventRecorder(),
      logger: silent,
      forget: () => undefined,
      forwardPsk: Buffer.alloc(32, 1),
      invocationTimeoutMs: 30_000,
    });
    await node.start();
    after(() => node.close());
    nodes.push(Object.assign(node, { id }));
  }
  await until("each node sees the others", () => nodes.every((n) => n.link.peers === 2));
  return { nodes, heard, rowCalls };
}

const leaseMessages = (heard: Message[], source: string) =>
  heard.filter((m) => m.s === source && (m.t === "want" || m.t === "released"));

test("a lease wanted by two waiting nodes goes to the first that asked, then to the other", async () => {
  const { nodes, heard } = await threeNodes();
  const [a, b, c] = nodes as [
    ClusterNode & { id: string },
    ClusterNode & { id: string },
    ClusterNode & { id: string },
  ];
  const source = "dc_leaseround";
  await a.leases.enter(source);
  const got: string[] = [];
  const bEntered = b.leases.enter(source).then(() => got.push("b"));
  await until("b asked", () => leaseMessages(heard, source).some((m) => m.t === "want" && m.n === b.id));
  const cEntered = c.leases.enter(source).then(() => got.push("c"));
  await until("c asked", () => leaseMessages(heard, source).some((m) => m.t === "want" && m.n === c.id));

  a.leases.exit(source);
  await bEntered;
  assert.ok(b.leases.holds(source));
  // c waits for b, whatever the timing of the release: b got the lease and has not finished its run.
  await sleep(300);
  assert.deepEqual(got, ["b"]);
  b.leases.exit(source);
  await cEntered;
  assert.deepEqual(got, ["b", "c"]);
  assert.ok(c.leases.holds(source) && !a.leases.holds(source) && !b.leases.holds(source));
  // b's release message goes out after its release, so c may take the lease before the test hears it.
  const released = () => leaseMessages(heard, source).filter((m) => m.t === "released");
  await until("both releases heard", () => released().length >= 2);
  const releases = released();
  assert.deepEqual(
    releases.map((m) => [m.n, m.to]),
    [
      [a.id, b.id],
      [b.id, c.id],
    ],
  );
  c.leases.exit(source);
});

test("a request that reaches a node still taking the lease is kept, and the lease goes to it after the run", async () => {
  const { nodes, heard } = await threeNodes();
  const [a, b] = nodes as [ClusterNode & { id: string }, ClusterNode & { id: string }];
  const source = "dc_leasekept";
  // The request arrives while a's take is still on its way to the store (enter has just begun it).
  const entered = a.leases.enter(source);
  a.leases.receive({ t: "want", s: source }, b.id);
  await entered;
  // Its run started under the lease: the request waits for it.
  assert.ok(a.leases.holds(source));
  a.leases.exit(source);
  await until("a gives the lease to b", () =>
    leaseMessages(heard, source).some((m) => m.t === "released" && m.n === a.id && m.to === b.id),
  );
  assert.ok(!a.leases.holds(source));
});

test("a node that gives a lease away sends its endpoint hits after it and leaves the row to the taker", async () => {
  const { nodes, heard, rowCalls } = await threeNodes();
  const [a, b] = nodes as [ClusterNode & { id: string }, ClusterNode & { id: string }];
  const source = "dc_leasemoved";
  await a.leases.enter(source);
  const got: string[] = [];
  const bEntered = b.leases.enter(source).then(() => got.push("b"));
  await until("b asked", () => leaseMessages(heard, source).some((m) => m.t === "want" && m.n === b.id));
  // Promised to b (after a's minimum hold): a hit that can run on any node is told to go to b.
  const moved = await eventually("a promised the lease to b", async () => {
    try {
      await a.leases.enter(source, true);
      a.leases.exit(source);
      return undefined;
    } catch (err) {
      return err;
    }
  });
  assert.ok(moved instanceof LeaseMoved, String(moved));
  assert.equal(moved.to, b.id);
  // a's run ends and the lease goes to b; an invocation that must run on a (a timer tick, say) asks b
  // and runs once b is done, and hits keep going to b.
  a.leases.exit(source);
  const aAgain = a.leases.enter(source).then(() => got.push("a"));
  await bEntered;
  assert.ok(b.leases.holds(source));
  await assert.rejects(a.leases.enter(source, true), (err) => err instanceof LeaseMoved && err.to === b.id);
  await sleep(300);
  assert.deepEqual(got, ["b"], "a waits for b's run");
  b.leases.exit(source);
  await aAgain;
  assert.deepEqual(got, ["b", "a"]);

  // The free row is left to the node the lease was given to, even one slow to take it (here one that
  // never does): a's next invocation, waiting from the start, does not try the row before 100 ms after
  // the release. Measured from the release's own call, so a slow machine only lengthens the wait.
  a.leases.exit(source);
  // Held past the 20 ms minimum, so that the request below gives the lease away at once.
  await sleep(30);
  const ghost = "ghost/1";
  a.leases.receive({ t: "want", s: source }, ghost);
  await a.leases.enter(source);
  const mine = rowCalls.filter((c) => c.source === source && c.node === a.id);
  const released = mine.findLast((c) => c.op === "release");
  assert.ok(released, "a gave the row back");
  const retaken = mine.find((c) => c.op === "acquire" && c.at >= released.at);
  assert.ok(retaken, "a took the row again");
  assert.ok(
    retaken.at - released.at >= 99,
    `a tried the row again ${retaken.at - released.at} ms after giving it away`,
  );
  await until("a's release names the ghost", () =>
    leaseMessages(heard, source).some((m) => m.t === "released" && m.n === a.id && m.to === ghost),
  );
  a.leases.exit(source);
});
