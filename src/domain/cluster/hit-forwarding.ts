/**
 * Hits go to the node that runs their source. With several nodes behind a load balancer that spreads
 * requests, a source's endpoint hits arrive at every node, but its invocations run on one node at a time
 * (source-leases.ts). Taking the lease over for each hit would move it back and forth, each move costing
 * round trips, a fresh read of the source's state and a wait for the holder's runs. Instead a node that
 * gets a hit of a source another live node holds sends the request on to that node, as it came, and
 * relays the answer: the source keeps running where it runs, with its batches and caches.
 *
 * Transport: one connection from each node to each other node it forwards to, opened as an HTTP upgrade
 * of `GET /_fount/forward` and then carried in TLS 1.3 with a pre-shared key derived from
 * FOUNT_ENCRYPTION_KEY (every node of the cluster has the key; a caller does not): the key authenticates
 * both ends, and hits, with their headers and bodies, never cross the network in clear, whatever the
 * network between the nodes. The handshake is once per connection; ECDHE in it gives each connection
 * keys of its own (a key leaked later does not open recorded traffic). Inside, each side writes frames
 * (lengths, metadata as JSON, the body's raw bytes): hits one way, answers the other, matched by a number,
 * answered in any order. The frames queued in one turn of the event loop go out in one write (encrypted
 * together), so that under load many hits share a system call and a wake-up of the other node (on
 * loopback a write costs the sender the receiver's TCP work too). A node forwards only to a node that gave its URL (`nodes.url`: FOUNT_NODE_URL, or the
 * address it listens on). This file decides where a hit goes; the connection's sending end is
 * peer-link.ts, its receiving end forwarded-hits.ts, and what both speak forwarding-protocol.ts.
 *
 * Failures: a node that cannot be connected to (refused, no answer, another key, a version without
 * forwarding or with another version of it) was sent nothing; it is skipped for a while and the hit
 * runs here, taking the lease as before (after the holder's heartbeat stops, if it died). A node
 * shutting down turns down new hits the same way. A connection that breaks after a hit went out may
 * have run it, so that caller gets 503 `node_unreachable` and retries, as from a node that died while
 * answering it.
 */
import type { FastifyBaseLogger } from "fastify";
import type { ClusterStore } from "../../storage/port.ts";
import type { Elsewhere, ForwardedHit, HitAnswer } from "./forwarding-protocol.ts";
import { PeerLink } from "./peer-link.ts";
import type { LeaseSpread } from "./placement.ts";
import { nodeDeadAfterMs, type SourceLeases } from "./source-leases.ts";

/** A node that could not be connected to gets no forwarded hit for this long. */
const unreachableForMs = 30_000;
/** How often hits sent and not answered are checked against their deadline. */
const sweepMs = 5_000;

/** Where a hit goes: another node, by name and URL. */
export interface ForwardTarget {
  nodeId: string;
  url: string;
}

/** What a node that was sent a hit made of it: its answer, or the hit was not run there. */
export type ForwardResult = HitAnswer | "not-sent" | Elsewhere;

export interface HitForwardingDeps {
  cluster: ClusterStore;
  leases: SourceLeases;
  nodeId: string;
  /** The URL another live node gave (undefined: unknown, dead, or it takes no forwarded hits). */
  peerUrl: (nodeId: string) => string | undefined;
  /** The cluster's pre-shared key for forwarding connections (from SecretBox.derive). */
  psk: Buffer;
  /** The longest a run may take: a forwarded hit waits that long and some for its answer. */
  invocationTimeoutMs: number;
  logger: FastifyBaseLogger;
  /** Which node should run each source (placement.ts): a source no live node holds goes there. */
  spread?: LeaseSpread;
}

/** The forwarding side: where each hit should run, and the connections to the other nodes. */
export class HitForwarding {
  readonly #d: HitForwardingDeps;
  /** Which node held each source's lease when last looked up. */
  readonly #holders = new Map<string, string>();
  readonly #lookups = new Map<string, Promise<ForwardTarget | undefined>>();
  /** Nodes that could not be connected to, until when they are skipped. */
  readonly #unreachable = new Map<string, number>();
  readonly #links = new Map<string, PeerLink>();
  readonly #sweep: NodeJS.Timeout;

  constructor(deps: HitForwardingDeps) {
    this.#d = deps;
    this.#sweep = setInterval(() => {
      const deadline = Date.now() - (deps.invocationTimeoutMs + 30_000);
      for (const link of this.#links.values()) link.expire(deadline);
    }, sweepMs);
    this.#sweep.unref();
  }

  /**
   * Where a hit of the source should run: another node's target, or undefined for this node (it holds
   * the lease or is taking it, no live node holds it and this node owns it, or the node cannot be reached).
   */
  route(sourceId: string): ForwardTarget | undefined | Promise<ForwardTarget | undefined> {
    if (this.#d.leases.engaged(sourceId)) return undefined;
    const holder = this.#holders.get(sourceId);
    if (holder !== undefined) {
      const target = this.#target(holder);
      if (target) return target;
      this.#holders.delete(sourceId);
    }
    let lookup = this.#lookups.get(sourceId);
    if (!lookup) {
      lookup = this.#lookUp(sourceId).finally(() => this.#lookups.delete(sourceId));
      this.#lookups.set(sourceId, lookup);
    }
    return lookup;
  }

  /**
   * Sends the hit to `target` and returns its answer; `not-sent` when that node could not be sent it
   * (unreachable, or shutting down): run it here; `Elsewhere` when that node does not run the source:
   * route it again. Throws `node_unreachable` when the connection broke after the hit went out.
   */
  async forward(target: ForwardTarget, hit: ForwardedHit): Promise<ForwardResult> {
    let link = this.#links.get(target.nodeId);
    if (link?.url !== target.url) {
      link?.close();
      link = new PeerLink(target.url, this.#d.psk, this.#d.nodeId);
      this.#links.set(target.nodeId, link);
    }
    const sent = await link.send(hit);
    if (sent.ok) return sent.answer;
    if (sent.why === "elsewhere") return { elsewhere: sent.to };
    this.#unreachable.set(target.nodeId, Date.now() + unreachableForMs);
    // A node shutting down still answers the hits it took; it ends the connection itself.
    if (sent.why !== "declined") {
      this.#links.delete(target.nodeId);
      link.close();
      this.#d.logger.warn(
        { err: sent.err, node: target.nodeId, url: target.url },
        `cannot reach the node running a source: its hits run here for ${unreachableForMs / 1000} s (check that node's FOUNT_NODE_URL, its FOUNT_ENCRYPTION_KEY and its version)`,
      );
    }
    return "not-sent";
  }

  /**
   * Whether a hit another node sent on should run here: this node holds the source, is taking it, or
   * owns it (placement.ts; it takes the lease, from its holder if need be) and knows of no other node
   * that holds it (one its hits arrive at, which keeps it: the hit had better go there).
   */
  runsHere(sourceId: string): boolean {
    if (this.#d.leases.engaged(sourceId) || this.#d.leases.taking(sourceId)) return true;
    if (this.#d.spread?.ownsHere(sourceId) !== true) return false;
    const holder = this.#holders.get(sourceId);
    return holder === undefined || this.#target(holder) === undefined;
  }

  /**
   * A hit of the source runs here: sent on by node `from`, or by a caller (undefined). Counted for the
   * placement, which gives a source to the node its hits arrive at (placement.ts).
   */
  ranHere(sourceId: string, from: string | undefined): void {
    this.#d.spread?.arrivals.count(sourceId, from);
  }

  /** Whether hits can be sent to node `nodeId` now: it gave a URL, is live, and is not skipped. */
  reachable(nodeId: string): boolean {
    return this.targetOf(nodeId) !== undefined;
  }

  /** The node this node last heard runs the source (another than this one), if any. */
  holderOf(sourceId: string): string | undefined {
    return this.#holders.get(sourceId);
  }

  /** Where to send node `nodeId` hits: undefined when it gave no URL, is not live, or is skipped. */
  targetOf(nodeId: string): ForwardTarget | undefined {
    return nodeId === this.#d.nodeId ? undefined : this.#target(nodeId);
  }

  /**
   * The source's lease was given back, meant for node `to` (its first asker), or the source is gone:
   * its hits go to `to` from now, or to the holder looked up again.
   */
  moved(sourceId: string, to?: string): void {
    if (to === undefined || to === this.#d.nodeId) this.#holders.delete(sourceId);
    else this.#holders.set(sourceId, to);
  }

  close(): void {
    clearInterval(this.#sweep);
    for (const link of this.#links.values()) link.close();
    this.#links.clear();
  }

  async #lookUp(sourceId: string): Promise<ForwardTarget | undefined> {
    // No live node holds it: it goes to the node that owns it (placement.ts), if not this one.
    const holder =
      (await this.#d.cluster.sourceLeaseHolder(sourceId, nodeDeadAfterMs)) ?? this.#d.spread?.owner(sourceId);
    if (holder === undefined || holder === this.#d.nodeId) return undefined;
    // This node may have begun to take it meanwhile.
    if (this.#d.leases.engaged(sourceId)) return undefined;
    const target = this.#target(holder);
    if (target) this.#holders.set(sourceId, holder);
    return target;
  }

  #target(nodeId: string): ForwardTarget | undefined {
    const until = this.#unreachable.get(nodeId);
    if (until !== undefined) {
      if (Date.now() < until) return undefined;
      this.#unreachable.delete(nodeId);
    }
    const url = this.#d.peerUrl(nodeId);
    return url === undefined ? undefined : { nodeId, url };
  }
}
