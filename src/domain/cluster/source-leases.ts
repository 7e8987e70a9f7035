/**
 * Run leases: with several nodes on one database, the invocations of a source run on one node at a
 * time, so that they stay one at a time and in order and `this.db`, dedupe state and event IDs stay
 * exact, whichever nodes received them.
 *
 * A node takes a source's lease before handing it an invocation and keeps it while it runs that source
 * (a sticky lease: a node that keeps getting a source's requests takes it once). Another node that gets
 * an invocation of the source asks for the lease on the cluster channel; the holder stops starting new
 * invocations of it, lets the ones it started commit, and gives it back; the asker takes it and reads
 * the source's state afresh. A node whose heartbeat stopped (it died) loses its leases to whoever asks
 * after `nodeDeadAfterMs`. Every commit of a run checks, in its transaction, that its node still holds
 * the lease at the generation it ran under (`assertSourceLease`), so a node that stalled past that
 * bound cannot commit over the new holder.
 */
import type { FastifyBaseLogger } from "fastify";
import { AppError } from "../../errors.ts";
import type { ClusterStore } from "../../storage/port.ts";

/** A node whose heartbeat is older than this is taken for dead (heartbeats go every second). */
export const nodeDeadAfterMs = 5_000;

/** A node as `fount admin nodes --json` and `GET /v1/admin/nodes` show it. */
export interface NodeView {
  /** `FOUNT_NODE_ID` and the process's own suffix. */
  id: string;
  /** `live` while its heartbeat is at most `nodeDeadAfterMs` old. */
  state: "live" | "dead";
  /** Where the other nodes send it the hits of the sources it runs. */
  url: string | null;
  /** Unix seconds. */
  started_at: number;
  heartbeat_at: number;
  heartbeat_age_ms: number;
  /** Sources whose run lease it holds: their invocations run there. */
  sources: number;
}

/** The nodes sharing the store: live ones and those killed in the last day, oldest start first. */
export async function nodeViews(cluster: ClusterStore): Promise<NodeView[]> {
  return (await cluster.nodes(nodeDeadAfterMs)).map((n) => ({
    id: n.id,
    state: n.live ? "live" : "dead",
    url: n.url ?? null,
    started_at: Math.floor(n.startedMs / 1000),
    heartbeat_at: Math.floor(n.heartbeatMs / 1000),
    heartbeat_age_ms: n.heartbeatAgeMs,
    sources: n.leases,
  }));
}

/** A waiting node asks the store again this often, besides when told that a lease was given back. */
const retryMs = 200;
/** A waiting node repeats its request to the holder this often (a message may be missed). */
const askEveryMs = 1_000;
/** A node that gave a lease away waits this long before asking for it again, so the asker gets it. */
const yieldMs = 25;
/**
 * A node keeps a lease it took at least this long before it gives it to a node that asked, so that a
 * source hit through several nodes moves with a batch of runs, not with one (each move costs round
 * trips and a fresh read of the source's state). A request that arrives while the lease is being taken
 * is kept for then, instead of being dropped until the asker repeats it.
 */
const minHoldMs = 20;
/**
 * A lease given to a node is left to that node this long: the others do not take the free row, but ask
 * that node for it, unless it gives the lease on first. The taker hears of the release through the
 * database, and a node that took the lease straight back for an invocation that arrived meanwhile made
 * the two pass it to and fro, each move a round of round trips (seconds in all, under load).
 */
const handOverMs = 100;

/**
 * Messages about leases on the cluster channel (cluster-link.ts carries them). A release names the node
 * it is meant for (`to`, the first that asked): the other waiting nodes leave it to that node, and ask
 * it in turn, so that a lease wanted by several nodes goes round them all.
 */
export type LeaseMessage = { t: "want"; s: string } | { t: "released"; s: string; to?: string };

/**
 * Thrown by `enter` for a movable invocation (an endpoint hit) when this node is giving the source to
 * node `to`: the hit had better go there than take the lease back (docs/architecture.md, "Several nodes").
 */
export class LeaseMoved extends Error {
  readonly to: string;

  constructor(to: string) {
    super(`the source's run lease went to node ${to}`);
    this.name = "LeaseMoved";
    this.to = to;
  }
}

export interface SourceLeasesDeps {
  cluster: ClusterStore;
  nodeId: string;
  logger: FastifyBaseLogger;
  /** Sends a message to the other nodes. */
  send: (message: LeaseMessage) => Promise<void>;
  /** This node took a lease it did not hold: what it cached of the source may be stale. */
  onTaken: (sourceId: string) => void;
  /** This node gave a lease back, meant for node `to`: its hits of the source go there now. */
  onReleased?: (sourceId: string, to: string | undefined) => void;
  /** Whether the placement puts the source on another node that can be reached (placement.ts). */
  placedElsewhere?: (sourceId: string) => boolean;
}

interface Lease {
  /** Held at this generation; undefined when not held. */
  gen: number | undefined;
  /** Invocations started under the lease and not finished. */
  active: number;
  /** Another node asked for it: no new invocation starts, and it is given back once `active` is 0. */
  wanted: boolean;
  /** When this node took it (`Date.now()`). */
  takenAt: number;
  /** Sets `wanted` once the lease was held `minHoldMs`. */
  wantTimer: NodeJS.Timeout | undefined;
  /** The nodes that asked for it since this node took it (or began to), first asker first. */
  askers: string[];
  /** The node it last went to (given by this node, or as another node's release said), until taken here. */
  goneTo: string | undefined;
  /**
   * When it was last given to a node other than this one, by this node or another (`Date.now()`); 0
   * when given to this node or to nobody in particular.
   */
  handOverAt: number;
  taking: Promise<void> | undefined;
  releasing: Promise<void> | undefined;
  /** Whoever waits for a change of this lease. */
  waiters: Set<() => void>;
}

export class SourceLeases {
  readonly #d: SourceLeasesDeps;
  readonly #leases = new Map<string, Lease>();
  #closed = false;

  constructor(deps: SourceLeasesDeps) {
    this.#d = deps;
  }

  /**
   * Waits until this node holds the source's lease and counts one invocation in; returns the generation.
   * A `movable` invocation (one that can run on any node, as an endpoint hit can) does not wait for a
   * lease this node is giving, or gave, to another node: it throws `LeaseMoved` naming that node, so
   * that the lease stays there instead of coming back for it. Others (timer ticks, deliveries, manual
   * runs) take the lease back in turn.
   */
  async enter(sourceId: string, movable = false): Promise<number> {
    for (;;) {
      if (this.#closed) throw new AppError("shutting_down");
      const lease = this.#lease(sourceId);
      if (lease.gen !== undefined && !lease.wanted) {
        lease.active++;
        return lease.gen;
      }
      if (movable && !lease.taking) {
        // Promised to its first asker, being given back, or given: it runs there from now on.
        const to = lease.releasing || lease.gen === undefined ? lease.goneTo : lease.askers[0];
        if (to !== undefined) throw new LeaseMoved(to);
      }
      if (lease.releasing) {
        await lease.releasing;
        await sleep(yieldMs);
      } else if (lease.gen !== undefined) {
        // Held but promised to another node: wait for the running invocations to give it back.
        await this.#changed(lease, retryMs);
      } else {
        lease.taking ??= this.#take(sourceId, lease).finally(() => {
          lease.taking = undefined;
        });
        await lease.taking;
      }
    }
  }

  /** An invocation started by `enter` finished (committed or failed). */
  exit(sourceId: string): void {
    const lease = this.#leases.get(sourceId);
    if (!lease) return;
    lease.active = Math.max(0, lease.active - 1);
    if (lease.active === 0 && lease.wanted) this.#release(sourceId, lease);
  }

  /** A commit found the lease taken at `gen`: this node no longer holds it. */
  lost(sourceId: string, gen: number): void {
    const lease = this.#leases.get(sourceId);
    if (lease?.gen !== gen) return;
    lease.gen = undefined;
    lease.wanted = false;
    dropRequests(lease);
    this.#wake(lease);
  }

  /** The source is gone. */
  forget(sourceId: string): void {
    const lease = this.#leases.get(sourceId);
    if (lease && lease.active === 0 && !lease.taking) this.#leases.delete(sourceId);
  }

  /** A message from node `from`. */
  receive(message: LeaseMessage, from: string): void {
    const lease = this.#leases.get(message.s);
    if (!lease) return;
    if (message.t === "released") {
      const to = message.to;
      if (to === undefined || to === this.#d.nodeId) {
        lease.handOverAt = 0;
        if (lease.gen === undefined) lease.goneTo = undefined;
        this.#wake(lease);
        return;
      }
      // Given to another node: left to it (handOverMs), and this node's hits go there.
      lease.handOverAt = Date.now();
      if (lease.gen === undefined) lease.goneTo = to;
      if (lease.taking) {
        // Meant for another node: ask that one, which keeps the request while it takes the lease.
        void this.#d.send({ t: "want", s: message.s }).catch(() => undefined);
      }
    } else if (lease.gen !== undefined || lease.taking) {
      if (!lease.askers.includes(from)) lease.askers.push(from);
      this.#want(message.s, lease);
    }
  }

  /** Another node asked for the lease: it is given back once held `minHoldMs` and its runs finished. */
  #want(sourceId: string, lease: Lease): void {
    if (lease.wanted || lease.wantTimer) return;
    const heldMs = lease.gen === undefined ? 0 : Date.now() - lease.takenAt;
    const wantNow = () => {
      lease.wantTimer = undefined;
      if (lease.gen === undefined) {
        // Still being taken: asked again once held. Lost or never taken: the asker asks again.
        if (lease.taking && !this.#closed) lease.wantTimer = setTimeout(wantNow, minHoldMs);
        return;
      }
      lease.wanted = true;
      if (lease.active === 0) this.#release(sourceId, lease);
    };
    if (lease.gen !== undefined && heldMs >= minHoldMs) wantNow();
    else lease.wantTimer = setTimeout(wantNow, minHoldMs - heldMs);
  }

  /**
   * Gives the lease to node `to` as if that node had asked for it (placement.ts): no new invocation
   * starts here once it was held `minHoldMs`, and it is given back, meant for `to`, when the started ones
   * finished. False when this node does not hold it or already gives it to a node.
   */
  giveAway(sourceId: string, to: string): boolean {
    const lease = this.#leases.get(sourceId);
    if (!lease || lease.gen === undefined || lease.releasing || lease.wanted || lease.askers.length > 0)
      return false;
    lease.askers.push(to);
    this.#want(sourceId, lease);
    return true;
  }

  /** The sources whose lease this node holds, with when it took each (`Date.now()`). */
  *heldSince(): Iterable<[sourceId: string, takenAt: number]> {
    for (const [sourceId, lease] of this.#leases)
      if (lease.gen !== undefined) yield [sourceId, lease.takenAt];
  }

  /** This node's name in the cluster. */
  get nodeId(): string {
    return this.#d.nodeId;
  }

  /**
   * Of these sources, those another live node holds, and those no node holds that the placement puts on
   * another node (`placedElsewhere`): their timer ticks are left to that node, which keeps the lease.
   */
  async heldElsewhere(sourceIds: string[]): Promise<Set<string>> {
    const held = await this.#d.cluster.leasedElsewhere(sourceIds, this.#d.nodeId, nodeDeadAfterMs);
    const placed = this.#d.placedElsewhere;
    if (placed) for (const id of sourceIds) if (!held.has(id) && !this.holds(id) && placed(id)) held.add(id);
    return held;
  }

  /** Whether this node holds the source's lease now. */
  holds(sourceId: string): boolean {
    return this.#leases.get(sourceId)?.gen !== undefined;
  }

  /**
   * Whether this node holds the source's lease or runs invocations under it. A node still waiting to
   * take it is not: its new hits had better go to the holder than queue behind the hand-over.
   */
  engaged(sourceId: string): boolean {
    const lease = this.#leases.get(sourceId);
    return lease !== undefined && (lease.gen !== undefined || lease.active > 0);
  }

  /** Whether this node is taking the source's lease now. */
  taking(sourceId: string): boolean {
    return this.#leases.get(sourceId)?.taking !== undefined;
  }

  /** How many leases this node holds (metrics, tests). */
  held(): number {
    let n = 0;
    for (const lease of this.#leases.values()) if (lease.gen !== undefined) n++;
    return n;
  }

  /** Stops taking leases; waiting invocations fail with `shutting_down`. Held leases go with the node's heartbeat. */
  close(): void {
    this.#closed = true;
    for (const lease of this.#leases.values()) {
      dropRequests(lease);
      this.#wake(lease);
    }
  }

  #lease(sourceId: string): Lease {
    let lease = this.#leases.get(sourceId);
    if (!lease) {
      lease = {
        gen: undefined,
        active: 0,
        wanted: false,
        takenAt: 0,
        wantTimer: undefined,
        askers: [],
        goneTo: undefined,
        handOverAt: 0,
        taking: undefined,
        releasing: undefined,
        waiters: new Set(),
      };
      this.#leases.set(sourceId, lease);
    }
    return lease;
  }

  async #take(sourceId: string, lease: Lease): Promise<void> {
    let askedAt = 0;
    while (!this.#closed) {
      // Just given to another node: that node takes the row, and is asked for it back (below).
      const handingOver = Date.now() - lease.handOverAt < handOverMs;
      const gen = handingOver
        ? undefined
        : await this.#d.cluster.acquireSourceLease(sourceId, this.#d.nodeId, nodeDeadAfterMs);
      if (gen !== undefined) {
        lease.gen = gen;
        lease.takenAt = Date.now();
        lease.wanted = false;
        lease.goneTo = undefined;
        this.#d.onTaken(sourceId);
        return;
      }
      if (Date.now() - askedAt >= askEveryMs) {
        askedAt = Date.now();
        await this.#d.send({ t: "want", s: sourceId }).catch((err: Error) => {
          this.#d.logger.warn({ err, sourceId }, "could not ask for a source's run lease");
        });
      }
      // Woken by a release to this node; else the row is tried again (a node that died gives nothing).
      await this.#changed(lease, handingOver ? handOverMs : retryMs);
    }
  }

  #release(sourceId: string, lease: Lease): void {
    const gen = lease.gen;
    if (gen === undefined || lease.releasing) return;
    const to = lease.askers[0];
    lease.goneTo = to;
    lease.handOverAt = to === undefined ? 0 : Date.now();
    dropRequests(lease);
    this.#d.onReleased?.(sourceId, to);
    lease.releasing = (async () => {
      try {
        await this.#d.cluster.releaseSourceLease(sourceId, this.#d.nodeId, gen);
      } catch (err) {
        // The row still names this node: the asker gets the lease once this node's heartbeat stops, or
        // this node takes it back (its own) when it runs the source next.
        this.#d.logger.warn({ err, sourceId }, "could not give a source's run lease back");
      }
      if (lease.gen === gen) lease.gen = undefined;
      lease.wanted = false;
      lease.releasing = undefined;
      this.#wake(lease);
      await this.#d.send({ t: "released", s: sourceId, to }).catch(() => undefined);
    })();
  }

  /** Resolves at the next change of the lease, or after `ms`. */
  #changed(lease: Lease, ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        lease.waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      lease.waiters.add(done);
    });
  }

  #wake(lease: Lease): void {
    for (const done of [...lease.waiters]) done();
  }
}

/** Forgets the other nodes' requests for the lease: it is given away, lost, or the node stops. */
function dropRequests(lease: Lease): void {
  clearTimeout(lease.wantTimer);
  lease.wantTimer = undefined;
  lease.askers = [];
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
