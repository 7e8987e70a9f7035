/**
 * The placement of sources over nodes (src/domain/cluster/placement.ts): rendezvous hashing spreads
 * sources evenly, every node computes the same owner from the same nodes in any order, and a node that
 * joins or leaves moves only the sources it wins or held. `LeaseSpread` gives away the leases that
 * belong elsewhere, and only those; the timer ticks of a source nobody holds are left to its owner.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import pino from "pino";
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
