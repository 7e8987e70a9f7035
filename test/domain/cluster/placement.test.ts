/**
 * The placement of sources over nodes (src/domain/cluster/placement.ts): rendezvous hashing spreads
 * sources evenly, every node computes the same owner from the same nodes in any order, and a node that
 * joins or leaves moves only the sources it wins or held. `LeaseSpread` gives away the leases that
 * belong elsewhere, and only those; the timer ticks of a source nobody holds are left to its owner.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import pino from "pino";
import { direct, HitArrivals } from "../../../src/domain/cluster/hit-arrivals.ts";
import { LeaseSpread, ownerOf } from "../../../src/domain/cluster/placement.ts";
import { SourceLeases } from "../../../src/domain/cluster/source-leases.ts";
import type { ClusterStore } from "../../../src/storage/port.ts";

const sources = Array.from({ length: 3_000 }, (_, i) => `src_${i.toString(36).padStart(6, "0")}abc`);
const nodes = ["n1/4f2a", "n2/9c1d", "n3/0b7e"];

const counts = (owners: Array<string | undefined>) => {
  const m = new Map<string, number>();
  for (const o of owners) if (o !== undefined) m.set(o, (m.get(o) ?? 0) + 1);
  return m;
};

test("sources spread evenly over the nodes, whatever order the nodes are listed in", () => {
  const owners = sources.map((s) => ownerOf(s, nodes));
  const byNode = counts(owners);
  assert.deepEqual([...byNode.keys()].sort(), nodes);
  for (const [node, n] of byNode) assert.ok(n > 850 && n < 1150, `${node} owns ${n} of 3,000`);
  const reversed = [...nodes].reverse();
  for (const [i, s] of sources.entries()) assert.equal(ownerOf(s, reversed), owners[i]);
});

test("no nodes: no owner; one node owns everything", () => {
  assert.equal(ownerOf("src_1", []), undefined);
  for (const s of sources.slice(0, 100)) assert.equal(ownerOf(s, ["only/1"]), "only/1");
});

test("a node that joins takes only sources it wins; one that leaves gives only its own", () => {
  const before = sources.map((s) => ownerOf(s, nodes));
  const joined = [...nodes, "n4/77aa"];
  const after = sources.map((s) => ownerOf(s, joined));
  let moved = 0;
  for (const [i, owner] of after.entries()) {
    if (owner === before[i]) continue;
    moved++;
    assert.equal(owner, "n4/77aa", "a source moves only to the node that joined");
  }
  assert.ok(moved > 600 && moved < 900, `${moved} of 3,000 moved to the fourth node (about a quarter)`);

  const left = nodes.filter((n) => n !== "n2/9c1d");
  for (const [i, s] of sources.entries()) {
    const owner = ownerOf(s, left);
    if (before[i] !== "n2/9c1d") assert.equal(owner, before[i], "sources of the nodes that stay stay");
    else assert.notEqual(owner, "n2/9c1d");
  }
});

/** A stand-in for SourceLeases: the leases held, and those given away. */
function fakeLeases(held: Array<[string, number]>) {
  const given: Array<[string, string]> = [];
  const leases = {
    heldSince: () => held,
    giveAway: (sourceId: string, to: string) => {
      given.push([sourceId, to]);
      return true;
    },
  } as unknown as SourceLeases;
  return { leases, given };
}

test("a node gives away the leases it holds of sources another reachable node owns, once held a while", () => {
  const mine = "n1/4f2a";
  const now = 100_000;
  const held = sources.slice(0, 60).map((s, i): [string, number] => [s, i === 0 ? now - 10 : now - 5_000]);
  const { leases, given } = fakeLeases(held);
  const unreachable = "n3/0b7e";
  const spread = new LeaseSpread({
    leases,
    nodeId: mine,
    reachable: (n) => n !== unreachable,
    now: () => now,
  });
  // Alone (or before the first heartbeat): nothing moves.
  assert.equal(spread.rebalance(), 0);
  spread.update([mine]);
  assert.equal(given.length, 0);
  spread.update([...nodes].reverse());
  assert.deepEqual(spread.members, nodes);
  const expected = held.filter(([s], i) => i > 0 && ownerOf(s, nodes) === "n2/9c1d").map(([s]) => s);
  assert.ok(expected.length > 5);
  assert.deepEqual(
    given.map(([s]) => s),
    expected,
    "only sources n2 owns; n3 is unreachable; the lease just taken is kept",
  );
  for (const [, to] of given) assert.equal(to, "n2/9c1d");
  for (const [s] of held) {
    assert.equal(spread.ownsHere(s), ownerOf(s, nodes) === mine);
    assert.equal(spread.owner(s), ownerOf(s, nodes));
  }
});

test("a timer tick of a source no node holds is left to the node the placement puts it on", async () => {
  const cluster = {
    // Another live node holds src_a; nobody holds the others.
    leasedElsewhere: async (ids: string[]) => new Set(ids.filter((id) => id === "src_a")),
  } as unknown as ClusterStore;
  const leases = new SourceLeases({
    cluster,
    nodeId: "n1/4f2a",
    logger: pino({ level: "silent" }),
    send: async () => undefined,
    onTaken: () => undefined,
    placedElsewhere: (id) => id === "src_b",
  });
  assert.deepEqual(
    [...(await leases.heldElsewhere(["src_a", "src_b", "src_c"]))].sort(),
    ["src_a", "src_b"],
    "src_b goes to its owner's timers; src_c is this node's to tick",
  );
});

/** A LeaseSpread of node n1 over the three nodes, holding `held` (taken long ago), at time `now`. */
function spreadHolding(held: string[], othersHeld: [number, number], now = 100_000) {
  const { leases, given } = fakeLeases(held.map((s) => [s, now - 60_000]));
  const spread = new LeaseSpread({ leases, nodeId: nodes[0]!, reachable: () => true, now: () => now });
  const update = () =>
    spread.update(
      nodes,
      new Map([
        [nodes[1]!, othersHeld[0]],
        [nodes[2]!, othersHeld[1]],
      ]),
    );
  return { spread, given, update };
}

/** `n` hits of the source, through node `from` (undefined: straight from callers). */
const hits = (spread: LeaseSpread, sourceId: string, from: string | undefined, n: number) => {
  for (let i = 0; i < n; i++) spread.arrivals.count(sourceId, from);
};

test("a lease follows its hits: given to the node its hits arrive at while that node has room", () => {
  const notMine = sources.filter((s) => ownerOf(s, nodes) !== nodes[0]).slice(0, 6);
  const [a, b, c, d] = notMine as [string, string, string, string];
  // n1 holds 6; n2 and n3 hold 6 each: the share is 6.
  const { spread, given, update } = spreadHolding(notMine, [6, 6]);
  hits(spread, a, nodes[2], 40); // every hit of a came through n3: a goes there
  hits(spread, b, nodes[1], 30); // b's through n2 mostly (30 of 36)
  hits(spread, b, undefined, 6);
  hits(spread, c, undefined, 40); // c's hits come here: n1 keeps it, whoever owns it
  hits(spread, d, nodes[1], 10); // d's come from everywhere: it goes by the hash
  hits(spread, d, nodes[2], 10);
  hits(spread, d, undefined, 10);
  update();
  const to = new Map(given);
  assert.equal(to.get(a), nodes[2]);
  assert.equal(to.get(b), nodes[1]);
  assert.equal(to.has(c), false, "c's hits arrive here");
  assert.equal(to.get(d), ownerOf(d, nodes));
  // The rest (no hits) by the hash, as before.
  for (const s of notMine.slice(4)) assert.equal(to.get(s), ownerOf(s, nodes));
});

test("a lease follows its hits only within the nodes' share, and a node keeps at most its share and one", () => {
  const mine = sources.filter((s) => ownerOf(s, nodes) === nodes[1]).slice(0, 9);
  // n1 holds 9 sources n2 owns, every one hit through here; n2 holds 0, n3 holds 3: the share is 4.
  const { spread, given, update } = spreadHolding(mine, [0, 3]);
  for (const s of mine) hits(spread, s, undefined, 20);
  update();
  assert.equal(
    given.length,
    4,
    "9 held, share 4: it keeps 5 whose hits arrive here, the rest go by the hash",
  );
  for (const [, to] of given) assert.equal(to, nodes[1]);

  // A node that is full gets no more: n3's hits, but n3 holds 10 of 12 (share 4).
  const other = sources.filter((s) => ownerOf(s, nodes) === nodes[0]).slice(0, 2);
  const full = spreadHolding(other, [0, 10]);
  for (const s of other) hits(full.spread, s, nodes[2], 20);
  full.update();
  assert.deepEqual(full.given, [], "n1 owns them and n3 is full: they stay");
});

test("a lease taken a moment ago, whose hits are too few to tell, is kept a while before the hash moves it", () => {
  const now = 100_000;
  const notMine = sources.filter((s) => ownerOf(s, nodes) !== nodes[0]).slice(0, 2);
  const { leases, given } = fakeLeases([
    [notMine[0]!, now - 1_000],
    [notMine[1]!, now - 4_000],
  ]);
  const spread = new LeaseSpread({ leases, nodeId: nodes[0]!, reachable: () => true, now: () => now });
  spread.update(nodes);
  assert.deepEqual(
    given.map(([s]) => s),
    [notMine[1]],
  );
});

test("hits counted weigh half as much at each heartbeat, and are forgotten once next to nothing", () => {
  const arrivals = new HitArrivals();
  for (let i = 0; i < 8; i++) arrivals.count("src_a", "n2/9c1d");
  for (let i = 0; i < 2; i++) arrivals.count("src_a", undefined);
  assert.deepEqual(arrivals.lead("src_a"), { via: "n2/9c1d", share: 0.8, total: 10 });
  arrivals.decay();
  assert.deepEqual(arrivals.lead("src_a"), { via: "n2/9c1d", share: 0.8, total: 5 });
  for (let i = 0; i < 12; i++) arrivals.count("src_a", undefined);
  assert.deepEqual(arrivals.lead("src_a"), { via: direct, share: 13 / 17, total: 17 });
  for (let i = 0; i < 6; i++) arrivals.decay();
  assert.equal(arrivals.lead("src_a"), undefined);
  assert.equal(arrivals.lead("src_b"), undefined);
});

test("an early heartbeat, written to learn of a node that just spoke, leaves the hits' weight as it was", () => {
  const { leases } = fakeLeases([]);
  const spread = new LeaseSpread({ leases, nodeId: nodes[0]!, reachable: () => true, now: () => 100_000 });
  hits(spread, "src_a", nodes[1], 8);
  spread.update(nodes, new Map(), false);
  assert.equal(spread.arrivals.lead("src_a")?.total, 8, "not halved by the early one");
  spread.update(nodes);
  assert.equal(spread.arrivals.lead("src_a")?.total, 4, "halved by the regular one");
});
