/**
 * This node's link to the others on the same database (drivers with `cluster`): its heartbeat, and one
 * LISTEN/NOTIFY channel that carries the events stored here to the other nodes' SSE streams, deleted
 * sources (their streams end everywhere), revoked access (streams check theirs at once, everywhere), the
 * run lease requests of source-leases.ts, and which kinds of cached rows a change made stale (the store's
 * row caches; a node that may have missed messages forgets all of them).
 *
 * Events go only where a stream waits for them: a node announces the emitters its SSE clients stream
 * (`watch`, again every `interestRefreshMs`), and the others send an emitter's events while such an
 * announcement is younger than `interestTtlMs`. A new stream goes live once every other live node has
 * confirmed the announcement, so an emit made anywhere after its headers reach it. A node that may not
 * know every announcement (just started, or its channel broke) sends all events for `interestTtlMs`.
 */
import type { FastifyBaseLogger } from "fastify";
import { randomString } from "../../ids.ts";
import type { ClusterStore, Storage } from "../../storage/port.ts";
import type { Bus } from "../bus.ts";
import type { EventRecorder } from "../events/recorder.ts";
import type { StreamInterest } from "../events/stream-hub.ts";
import type { EventRecord } from "../types.ts";
import { channel } from "./cluster-channel.ts";
import { defaultInterestTimings, type InterestTimings, type Message } from "./cluster-messages.ts";
import { HitForwarding } from "./hit-forwarding.ts";
import { LeaseSpread } from "./placement.ts";
import { type LeaseMessage, nodeDeadAfterMs, SourceLeases } from "./source-leases.ts";

/** Wake-ups for the other nodes' dispatchers go at most this often (one NOTIFY each). */
const wakeEveryMs = 10;
/** Heartbeat period; `nodeDeadAfterMs` is five of them. */
const heartbeatMs = 1_000;
/** A node this one does not know that speaks makes it read the live nodes again, at most this often. */
const learnEveryMs = 200;
/** NOTIFY payloads must stay under PostgreSQL's 8,000 bytes. */
const maxPayloadBytes = 7_800;
/** Emitter IDs per `watch` message (an ID is about 26 bytes). */
const watchBatch = 200;

export interface ClusterLinkDeps {
  store: Storage;
  cluster: ClusterStore;
  nodeId: string;
  bus: Bus;
  logger: FastifyBaseLogger;
  /** Lease messages from other nodes, with the sender's name. */
  onLeaseMessage: (message: LeaseMessage, from: string) => void;
  /** A source was deleted through another node. */
  onDeleted: (sourceId: string) => void;
  /** Another node queued deliveries to a source this node may run (`wakeOthers`): claim them. */
  onWake?: () => void;
  /**
   * After each heartbeat: the live nodes that take forwarded hits (this one too, once it listens), and
   * the leases each other live node held at its own last heartbeat. `regular`: a heartbeat of the
   * interval, not an early one written to learn of a node that just spoke.
   */
  onMembers?: (members: string[], held: ReadonlyMap<string, number>, regular: boolean) => void;
  /** How many source leases this node holds, for its heartbeat. */
  held?: () => number;
  interest?: Partial<InterestTimings>;
  /** Heartbeat period (ms; 1,000, which `nodeDeadAfterMs` assumes; tests lengthen it). */
  heartbeatMs?: number;
  now?: () => number;
}

export class ClusterLink implements StreamInterest {
  readonly #d: ClusterLinkDeps;
  #stopListening: (() => Promise<void>) | undefined;
  #heartbeat: NodeJS.Timeout | undefined;
  #offBus: Array<() => void> = [];
  /** Other live nodes at the last heartbeat: events are sent only when there are some. */
  #peerIds = new Set<string>();
  /** A heartbeat run early because a node it did not know spoke (`#receive`); one at a time. */
  #learning: Promise<void> | undefined;
  #learnedAt = Number.NEGATIVE_INFINITY;
  /** The URLs other live nodes gave at the last heartbeat (hit-forwarding.ts). */
  #peerUrls = new Map<string, string>();
  /** Where the other nodes reach this one, once it listens (undefined: it takes no forwarded hits). */
  #url: string | undefined;
  #outbox: EventRecord[] = [];
  #flushing = false;
  #heartbeatFailing = false;
  /** A wake-up for the other nodes' dispatchers is about to be sent (`wakeOthers`). */
  #wakePending = false;
  readonly #timings: InterestTimings;
  readonly #now: () => number;
  /** Open streams on this node, by emitter. */
  readonly #watching = new Map<string, number>();
  /** Announcements of the first stream of an emitter, waiting for confirmations. */
  readonly #announcing = new Map<string, Promise<void>>();
  /** Confirmations awaited, by request: how many, the nodes that confirmed, and what ends the wait. */
  readonly #acks = new Map<string, { expected: number; from: Set<string>; finish: () => void }>();
  /** Other nodes' streamed emitters, until when the announcement holds. */
  readonly #interest = new Map<string, number>();
  /** Until then every event is sent (see the file comment); Infinity while the channel is down. */
  #sendAllUntil: number;
  #refresh: NodeJS.Timeout | undefined;

  constructor(deps: ClusterLinkDeps) {
    this.#d = deps;
    this.#timings = { ...defaultInterestTimings, ...deps.interest };
    this.#now = deps.now ?? Date.now;
    this.#sendAllUntil = Number.POSITIVE_INFINITY;
  }

  /** Starts the heartbeat and the channel; the first heartbeat is written before it resolves. */
  async start(): Promise<void> {
    await this.#beat();
    this.#heartbeat = setInterval(() => void this.#beat(), this.#d.heartbeatMs ?? heartbeatMs).unref();
    // Sent whether or not other nodes were alive at the last heartbeat: one that just started caches too.
    this.#d.cluster.onStale((kinds) => void this.#send({ n: this.#d.nodeId, t: "stale", k: kinds }));
    this.#stopListening = await this.#d.cluster.listen(
      channel,
      (payload) => this.#receive(payload),
      (err) => {
        // Changes made meanwhile through other nodes went unheard, and so may announcements of streams.
        this.#d.cluster.forgetCached();
        this.#sendAllUntil = Number.POSITIVE_INFINITY;
        this.#d.logger.warn(
          { err },
          "cluster channel broke; opening it again (live events from other nodes may be missed meanwhile)",
        );
      },
      () => {
        // Listening (again): within a TTL every live announcement has been repeated.
        this.#sendAllUntil = this.#now() + this.#timings.ttlMs;
      },
    );
    // Nodes that started before this one count their peers at their own heartbeat, up to a second
    // later: until then they would send this node nothing (an SSE stream here missed the first emits
    // made there). Any message from a node they do not know makes them count again at once; an empty
    // announcement says this one is here.
    void this.#send({ n: this.#d.nodeId, t: "watch", e: [] });
    this.#refresh = setInterval(() => this.#refreshInterest(), this.#timings.refreshMs).unref();
    this.#offBus.push(
      this.#d.bus.on("event.stored", (e) => this.#queue(e)),
      this.#d.bus.on("source.deleted", ({ sourceId, remote }) => {
        if (!remote) void this.#send({ n: this.#d.nodeId, t: "deleted", s: sourceId });
      }),
      this.#d.bus.on("access.revoked", ({ userId: u, remote }) => {
        if (!remote) void this.#send({ n: this.#d.nodeId, t: "revoked", u });
      }),
    );
  }

  /** Other nodes alive at the last heartbeat. */
  get peers(): number {
    return this.#peerIds.size;
  }

  /**
   * An SSE client of this node streams `emitterId`: once `ready`, every other live node sends its
   * events here. `release` when the stream ends.
   */
  watch(emitterId: string): { ready: Promise<void>; release: () => void } {
    const count = this.#watching.get(emitterId) ?? 0;
    this.#watching.set(emitterId, count + 1);
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      const left = (this.#watching.get(emitterId) ?? 1) - 1;
      if (left > 0) this.#watching.set(emitterId, left);
      else this.#watching.delete(emitterId);
    };
    let ready = this.#announcing.get(emitterId);
    if (!ready) {
      // Already announced (refreshed since), or nobody else to tell: a node that joins later sends
      // everything until this one's next refresh has reached it.
      if (count > 0 || this.#peerIds.size === 0) ready = Promise.resolve();
      else {
        ready = this.#announce(emitterId).finally(() => this.#announcing.delete(emitterId));
        this.#announcing.set(emitterId, ready);
      }
    }
    return { ready, release };
  }

  /** Announces a newly streamed emitter; resolves once every live peer confirmed, or after the timeout. */
  #announce(emitterId: string): Promise<void> {
    const request = randomString(12);
    return new Promise<void>((resolve) => {
      const finish = () => {
        clearTimeout(timer);
        this.#acks.delete(request);
        resolve();
      };
      // A node that died since the last heartbeat never answers.
      const timer = setTimeout(finish, this.#timings.ackTimeoutMs);
      timer.unref();
      this.#acks.set(request, { expected: this.#peerIds.size, from: new Set(), finish });
      void this.#send({ n: this.#d.nodeId, t: "watch", e: [emitterId], a: request });
    });
  }

  /** Announces again every emitter streamed here, and forgets other nodes' expired announcements. */
  #refreshInterest(): void {
    const now = this.#now();
    for (const [emitterId, until] of this.#interest) if (until <= now) this.#interest.delete(emitterId);
    if (this.#peerIds.size === 0 || this.#watching.size === 0) return;
    const ids = [...this.#watching.keys()];
    for (let i = 0; i < ids.length; i += watchBatch)
      void this.#send({ n: this.#d.nodeId, t: "watch", e: ids.slice(i, i + watchBatch) });
  }

  /** Whether another node may stream this emitter's events. */
  #wanted(emitterId: string): boolean {
    const now = this.#now();
    return now < this.#sendAllUntil || (this.#interest.get(emitterId) ?? 0) > now;
  }

  /** This node listens at `url` for hits forwarded by the others (written with the next heartbeat). */
  advertise(url: string): void {
    this.#url = url;
    void this.#beat();
  }

  /** Other live nodes that gave a URL for forwarded hits, as of the last heartbeat. */
  get forwardablePeers(): number {
    return this.#peerUrls.size;
  }

  /** The URL another live node gave, as of the last heartbeat. */
  peerUrl(nodeId: string): string | undefined {
    return this.#peerUrls.get(nodeId);
  }

  /** Sends a lease message to the other nodes. */
  sendLease(message: LeaseMessage): Promise<void> {
    return this.#send({ n: this.#d.nodeId, ...message });
  }

  /** Stops the heartbeat and leaves the cluster: the leases this node held are free at once. */
  async close(): Promise<void> {
    for (const off of this.#offBus) off();
    this.#offBus = [];
    if (this.#heartbeat) clearInterval(this.#heartbeat);
    if (this.#refresh) clearInterval(this.#refresh);
    for (const { finish } of [...this.#acks.values()]) finish();
    await this.#flush();
    await this.#stopListening?.();
    await this.#d.cluster.leave(this.#d.nodeId).catch(() => undefined);
  }

  async #beat(regular = true): Promise<void> {
    try {
      await this.#d.cluster.heartbeat(this.#d.nodeId, this.#url, this.#d.held?.() ?? 0);
      const live = await this.#d.cluster.liveNodes(nodeDeadAfterMs);
      const others = live.filter((n) => n.id !== this.#d.nodeId);
      this.#peerIds = new Set(others.map((n) => n.id));
      this.#peerUrls = new Map(others.flatMap((n) => (n.url === undefined ? [] : [[n.id, n.url]])));
      const members = others.flatMap((n) => (n.url === undefined ? [] : [n.id]));
      if (this.#url !== undefined) members.push(this.#d.nodeId);
      this.#d.onMembers?.(members, new Map(others.map((n) => [n.id, n.held])), regular);
      if (this.#heartbeatFailing) this.#d.logger.info("cluster heartbeat written again");
      this.#heartbeatFailing = false;
    } catch (err) {
      if (!this.#heartbeatFailing)
        this.#d.logger.warn(
          { err },
          "cluster heartbeat failed; other nodes take this node's leases after 5 s",
        );
      this.#heartbeatFailing = true;
    }
  }

  #queue(event: EventRecord): void {
    if (this.#peerIds.size === 0 || !this.#wanted(event.emitterId)) return;
    this.#outbox.push(event);
    if (this.#outbox.length === 1 && !this.#flushing) setImmediate(() => void this.#flush());
  }

  /** Sends the queued events in as few messages as fit; an event too large for one goes by reference. */
  async #flush(): Promise<void> {
    if (this.#flushing) return;
    this.#flushing = true;
    try {
      while (this.#outbox.length > 0) {
        const events = this.#outbox;
        this.#outbox = [];
        const n = this.#d.nodeId;
        let batch: string[] = [];
        let size = 0;
        const refs: Array<[string, string, number, number]> = [];
        const sends: Promise<void>[] = [];
        const sendBatch = () => {
          if (batch.length === 0) return;
          sends.push(this.#sendRaw(`{"n":${JSON.stringify(n)},"t":"events","e":[${batch.join(",")}]}`));
          batch = [];
          size = 0;
        };
        // What the events of one message may take, leaving room for its envelope.
        const room = maxPayloadBytes - 200;
        for (const e of events) {
          const json = JSON.stringify(e);
          const bytes = Buffer.byteLength(json) + 1;
          if (bytes > room) {
            refs.push([e.emitterId, e.channel, e.idMs, e.idSeq]);
            continue;
          }
          if (size + bytes > room) sendBatch();
          batch.push(json);
          size += bytes;
        }
        sendBatch();
        for (let i = 0; i < refs.length; i += 100)
          sends.push(this.#send({ n, t: "event-ref", r: refs.slice(i, i + 100) }));
        await Promise.all(sends);
      }
    } finally {
      this.#flushing = false;
    }
  }

  #send(message: Message): Promise<void> {
    return this.#sendRaw(JSON.stringify(message));
  }

  async #sendRaw(payload: string): Promise<void> {
    try {
      await this.#d.cluster.notify(channel, payload);
    } catch (err) {
      this.#d.logger.warn({ err }, "could not send a message to the other nodes");
    }
  }

  #receive(payload: string): void {
    let message: Message;
    try {
      message = JSON.parse(payload) as Message;
    } catch {
      return;
    }
    if (message.n === this.#d.nodeId) return;
    // At most one early heartbeat in flight and one per `learnEveryMs`: a node whose own heartbeat is
    // late (overloaded, or leaving) may still speak, and is not counted until it writes one.
    if (!this.#peerIds.has(message.n) && !this.#learning && this.#now() - this.#learnedAt >= learnEveryMs) {
      this.#learnedAt = this.#now();
      this.#learning = this.#beat(false).finally(() => {
        this.#learning = undefined;
      });
    }
    switch (message.t) {
      case "want":
        this.#d.onLeaseMessage({ t: "want", s: message.s }, message.n);
        break;
      case "released":
        this.#d.onLeaseMessage({ t: "released", s: message.s, to: message.to }, message.n);
        break;
      case "events":
        for (const e of message.e) this.#d.bus.emit("event.replicated", e);
        break;
      case "event-ref":
        void this.#fetch(message.r);
        break;
      case "stale":
        this.#d.cluster.forgetCached(message.k);
        break;
      case "watch": {
        const until = this.#now() + this.#timings.ttlMs;
        for (const emitterId of message.e) this.#interest.set(emitterId, until);
        // Confirmed once registered: an event this node stores from now on is sent.
        if (message.a) void this.#send({ n: this.#d.nodeId, t: "ack", a: message.a, to: message.n });
        break;
      }
      case "ack":
        if (message.to === this.#d.nodeId) {
          const waiting = this.#acks.get(message.a);
          waiting?.from.add(message.n);
          if (waiting && waiting.from.size >= waiting.expected) waiting.finish();
        }
        break;
      case "deleted":
        this.#d.onDeleted(message.s);
        this.#d.bus.emit("source.deleted", { sourceId: message.s, remote: true });
        break;
      case "wake":
        this.#d.onWake?.();
        break;
      case "revoked":
        this.#d.cluster.forgetCached(["accounts"]);
        this.#d.bus.emit("access.revoked", { userId: message.u, remote: true });
        break;
    }
  }

  /**
   * Tells the other nodes' dispatchers to claim: a commit of this node queued deliveries to a source
   * another node runs, which are left to that node's claims (`DeliveryClaim.member`) and would otherwise
   * wait for its next poll. At most one message per `wakeEveryMs`, none without other live nodes.
   */
  wakeOthers(): void {
    if (this.#peerIds.size === 0 || this.#wakePending) return;
    this.#wakePending = true;
    setTimeout(() => {
      this.#wakePending = false;
      void this.#send({ n: this.#d.nodeId, t: "wake" });
    }, wakeEveryMs).unref();
  }

  /** Reads events that were too large for a message. */
  async #fetch(refs: Array<[string, string, number, number]>): Promise<void> {
    for (const [emitterId, ch, ms, seq] of refs) {
      try {
        // `before` is "newer than": the oldest event after the one before this ID is this one.
        const page = await this.#d.store.listEvents(emitterId, {
          channel: ch,
          limit: 1,
          before: { ms, seq: seq - 1 },
        });
        const e = page.items[0];
        if (e?.idMs === ms && e.idSeq === seq) this.#d.bus.emit("event.replicated", e);
      } catch (err) {
        this.#d.logger.warn({ err, emitterId }, "could not read an event stored by another node");
      }
    }
  }
}

/** This node's part in a cluster: its link, its source leases and the forwarding of hits, wired together. */
export interface ClusterNode {
  link: ClusterLink;
  leases: SourceLeases;
  forwarding: HitForwarding;
  start(): Promise<void>;
  close(): Promise<void>;
}

/**
 * Wires a node into the cluster of its store: leases ask and answer over the link, events get IDs
 * from locked clocks unless this node holds their source, and `forget` drops what this node cached of
 * a source that another node ran or deleted.
 */
export function clusterNode(deps: {
  store: Storage;
  cluster: ClusterStore;
  nodeId: string;
  bus: Bus;
  recorder: EventRecorder;
  logger: FastifyBaseLogger;
  forget: (sourceId: string) => void;
  /** The pre-shared key of the forwarding connections' TLS (from SecretBox.derive). */
  forwardPsk: Buffer;
  invocationTimeoutMs: number;
  /** Another node queued deliveries to a source this node may run: claim them. */
  onWake?: () => void;
}): ClusterNode {
  const leases: SourceLeases = new SourceLeases({
    cluster: deps.cluster,
    nodeId: deps.nodeId,
    logger: deps.logger,
    send: (m) => link.sendLease(m),
    onTaken: deps.forget,
    onReleased: (sourceId, to) => forwarding.moved(sourceId, to),
    placedElsewhere: (sourceId) => {
      const owner = spread.owner(sourceId);
      return owner !== undefined && owner !== deps.nodeId && forwarding.reachable(owner);
    },
  });
  const link: ClusterLink = new ClusterLink({
    ...deps,
    onLeaseMessage: (m, from) => {
      leases.receive(m, from);
      if (m.t === "released") forwarding.moved(m.s, m.to);
      if (m.t === "released" && m.to === deps.nodeId) spread.adopt(m.s);
    },
    held: () => leases.held(),
    onMembers: (members, held, regular) => spread.update(members, held, regular),
    onDeleted: (sourceId) => {
      deps.forget(sourceId);
      leases.forget(sourceId);
      forwarding.moved(sourceId);
    },
  });
  const spread: LeaseSpread = new LeaseSpread({
    leases,
    nodeId: deps.nodeId,
    reachable: (nodeId) => forwarding.reachable(nodeId),
  });
  const forwarding = new HitForwarding({
    cluster: deps.cluster,
    leases,
    nodeId: deps.nodeId,
    peerUrl: (nodeId) => link.peerUrl(nodeId),
    psk: deps.forwardPsk,
    invocationTimeoutMs: deps.invocationTimeoutMs,
    logger: deps.logger,
    spread,
  });
  deps.recorder.ids.shareStore((emitterId) => leases.holds(emitterId));
  return {
    link,
    leases,
    forwarding,
    start: () => link.start(),
    close: async () => {
      leases.close();
      await link.close();
      forwarding.close();
    },
  };
}
