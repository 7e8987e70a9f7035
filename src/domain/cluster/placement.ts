/**
 * Where each source runs in a cluster: rendezvous (highest random weight) hashing of source IDs over the
 * live nodes that take forwarded hits. Every node computes the same owner from the same list of nodes,
 * with no message and no shared table; a node that joins takes from each other node only the sources
 * it now wins (about 1/n of them), and a node that leaves gives only its own sources, each to the node
 * that comes second for it, so nothing else moves.
 *
 * `LeaseSpread` applies it: at each heartbeat a node gives the leases it holds of sources another live
 * node owns to that node (source-leases.ts `giveAway`, the hand-over a request by that node would start),
 * and hit-forwarding.ts sends a hit of a source that no live node holds to its owner. So a cluster warmed
 * up through one node ends spread, and a joining or leaving node gets or gives its share, without any
 * lease going to and fro: the owner depends only on the list of nodes, which every node reads from the
 * same table each second.
 *
 * Leases follow their hits, within each node's fair share: a source whose recent hits nearly all reach
 * one node (a load balancer that routes by path or host, or callers that use one node) is given to that
 * node while it holds at most its share of the leases, and kept there while that node holds at most its
 * share and one, whatever the hash says, so that those hits cost no forwarding hop. (Giving up to one
 * past the share lets two full nodes swap sources whose hits reach the other.) A source whose
 * hits arrive everywhere, or hardly at all, goes by the hash. Each node decides for the leases it holds,
 * from where their hits came in (hit-arrivals.ts) and the lease counts the nodes' heartbeats report.
 */
import { direct, HitArrivals } from "./hit-arrivals.ts";
import type { SourceLeases } from "./source-leases.ts";

/** The weight of `nodeId` for `key`: a 32-bit hash of both (FNV-1a, then murmur3's finaliser to spread it). */
export function weight(nodeId: string, key: string): number {
  let h = 0x811c9dc5;
  const mix = (s: string) => {
    for (let i = 0; i < s.length; i++) {
      h ^= s.charCodeAt(i);
      h = Math.imul(h, 0x01000193);
    }
  };
  mix(nodeId);
  h ^= 0xff;
  h = Math.imul(h, 0x01000193);
  mix(key);
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** The node of `nodes` that owns `key`: the highest weight, ties to the smaller ID; undefined for none. */
export function ownerOf(key: string, nodes: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestWeight = -1;
  for (const node of nodes) {
    const w = weight(node, key);
    if (w > bestWeight || (w === bestWeight && best !== undefined && node < best)) {
      best = node;
      bestWeight = w;
    }
  }
  return best;
}

/** A lease taken this recently is not given away yet, so that its first runs (and their batches) happen. */
const keepAtLeastMs = 500;
/**
 * A lease taken this recently, whose hits are still too few to say where they arrive, is kept, so that a
 * source given to the node its hits reach is not given back by the hash before its hits there count.
 */
const settleMs = 3_000;
/** A source's hits arrive at one node when it gets this part of them (of at least `minHits`, decayed). */
const leadShare = 0.75;
/** Hits (decayed: a steady 2 a second) below which where they arrive does not move a lease. */
const minHits = 4;

export interface LeaseSpreadDeps {
  leases: SourceLeases;
  nodeId: string;
  /** Whether hits can be sent to node `nodeId` now (it gave a URL and is not skipped as unreachable). */
  reachable: (nodeId: string) => boolean;
  now?: () => number;
}

/** This node's view of the placement, and the hand-over of the leases it holds that belong elsewhere. */
export class LeaseSpread {
  readonly #d: LeaseSpreadDeps;
  #members: readonly string[] = [];
  /** Owners computed for the current members, by source. */
  readonly #owners = new Map<string, string | undefined>();
  /** The leases each member held at its last heartbeat. */
  #held: ReadonlyMap<string, number> = new Map();
  /** Where the hits of the sources this node runs came in. */
  readonly arrivals = new HitArrivals();

  constructor(deps: LeaseSpreadDeps) {
    this.#d = deps;
  }

  /** The live nodes that take forwarded hits, as of the last heartbeat (this one included once it listens). */
  get members(): readonly string[] {
    return this.#members;
  }

  /**
   * At each heartbeat: the live nodes that take forwarded hits and the leases each holds. Sets them,
   * gives away the leases that belong elsewhere now, and, at a heartbeat of the interval (`regular`),
   * lets the hits counted so far weigh less: an early one, written to learn of a node that just spoke,
   * would otherwise halve them once more than the interval says.
   */
  update(members: readonly string[], held: ReadonlyMap<string, number> = new Map(), regular = true): void {
    const sorted = [...members].sort();
    if (sorted.join("\n") !== this.#members.join("\n")) {
      this.#members = sorted;
      this.#owners.clear();
    }
    this.#held = held;
    this.rebalance();
    if (regular) this.arrivals.decay();
  }

  /** The node that should run the source; undefined when no node takes forwarded hits. */
  owner(sourceId: string): string | undefined {
    if (this.#owners.has(sourceId)) return this.#owners.get(sourceId);
    const owner = ownerOf(sourceId, this.#members);
    // Bounded: a cluster serving more sources than this recomputes the rest (a few hashes each).
    if (this.#owners.size < 100_000) this.#owners.set(sourceId, owner);
    return owner;
  }

  /** Whether this node owns the source (with no members known, no node does). */
  ownsHere(sourceId: string): boolean {
    return this.owner(sourceId) === this.#d.nodeId;
  }

  /**
   * A release named this node (another node gave it the lease, as the placement says, or because this
   * node asked). When no run here is taking it, it is taken now, so that the row is not left free for
   * another node's delivery claim or timer tick to take, and then given back here again.
   */
  adopt(sourceId: string): void {
    const leases = this.#d.leases;
    if (leases.engaged(sourceId) || leases.taking(sourceId)) return;
    leases.enter(sourceId).then(
      () => leases.exit(sourceId),
      () => undefined,
    );
  }

  /**
   * Gives each lease this node holds of a source that belongs elsewhere to that node: the node its hits
   * arrive at, if that node holds fewer than its share, else the source's owner, unless its hits arrive
   * here and this node holds at most its share and one (see the file's opening comment). Returns how many
   * it began to give. A node that is not a member itself (it takes no forwarded hits) gives its leases
   * away too: it can send them the hits.
   */
  rebalance(): number {
    if (this.#members.length === 0) return 0;
    const now = (this.#d.now ?? Date.now)();
    const held = [...this.#d.leases.heldSince()];
    let total = 0;
    for (const node of this.#members)
      total += node === this.#d.nodeId ? held.length : (this.#held.get(node) ?? 0);
    const share = Math.ceil(total / this.#members.length);
    let mine = held.length;
    /** Leases given to each node in this pass, which its last heartbeat's count does not show yet. */
    const givenTo = new Map<string, number>();
    const give = (sourceId: string, to: string): boolean => {
      if (!this.#d.leases.giveAway(sourceId, to)) return false;
      this.arrivals.forget(sourceId);
      givenTo.set(to, (givenTo.get(to) ?? 0) + 1);
      mine--;
      return true;
    };
    let given = 0;
    for (const [sourceId, takenAt] of held) {
      if (now - takenAt < keepAtLeastMs) continue;
      const lead = this.arrivals.lead(sourceId);
      const oneNode = lead !== undefined && lead.share >= leadShare;
      // Its hits arrive at one node: there, while that node has room. A lease whose hits arrive here
      // stays however few they are; one goes to another node only on enough of them (a move costs).
      if (oneNode && lead.via === direct) {
        if (mine <= share + 1) continue;
      } else if (
        oneNode &&
        lead.total >= minHits &&
        this.#d.reachable(lead.via) &&
        (this.#held.get(lead.via) ?? 0) + (givenTo.get(lead.via) ?? 0) <= share
      ) {
        if (give(sourceId, lead.via)) given++;
        continue;
      } else if ((lead === undefined || lead.total < minHits) && now - takenAt < settleMs) continue;
      const owner = this.owner(sourceId);
      if (owner === undefined || owner === this.#d.nodeId || !this.#d.reachable(owner)) continue;
      if (give(sourceId, owner)) given++;
    }
    return given;
  }
}
