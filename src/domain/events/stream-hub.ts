/**
 * Live fan-out of stored events to SSE clients: one `event.stored` listener for every client, an index
 * emitter → channel → clients, and per-client backpressure. A client whose socket stops draining gets
 * a bounded queue and is dropped when it stays over the bound (it reconnects with Last-Event-ID and
 * replays from the store), so a slow client costs an emit one array push, never a wait.
 */
import type { Writable } from "node:stream";
import { AppError } from "../../errors.ts";
import type { Bus } from "../bus.ts";
import type { EventRecord } from "../types.ts";
import type { EventIdParts } from "./event-ids.ts";

/** Tunables of a StreamHub; tests shorten the intervals and bounds. */
export interface StreamHubOptions {
  /** A `:keepalive` comment goes to every live client this often, so proxies keep the connection. */
  keepaliveMs: number;
  /** Sent as `retry:` when a stream opens: how long clients wait before reconnecting. */
  retryMs: number;
  /** Events a client may have waiting for its socket to drain; see `stallMs`. */
  maxQueuedEvents: number;
  /** Bytes a client may have waiting for its socket to drain; see `stallMs`. */
  maxQueuedBytes: number;
  /**
   * A client still over a queue bound this long after crossing it is dropped; one over four times a
   * bound is dropped at once. The grace lets a healthy client absorb a burst (one invocation may emit
   * 1,000 events at once) that no socket could take before the next drain.
   */
  stallMs: number;
}

export const defaultStreamHubOptions: StreamHubOptions = {
  keepaliveMs: 15_000,
  // The WHATWG default; sent explicitly so every client library waits the same.
  retryMs: 3_000,
  // 1,000 events or 4 MiB: a few seconds of a busy source, and room for four events of the 1 MiB maximum.
  maxQueuedEvents: 1_000,
  maxQueuedBytes: 4 * 1024 * 1024,
  stallMs: 1_000,
};

/** Over this many times a queue bound, a client is dropped without waiting for `stallMs`. */
const hardBoundFactor = 4;

/**
 * Where streams' events come from besides this process (cluster-link.ts): `watch` says a stream of an
 * emitter opened here; it goes live once `ready`, and calls `release` when it ends.
 */
export interface StreamInterest {
  watch(emitterId: string): { ready: Promise<void>; release: () => void };
}

/** Counters of a hub, for tests, logs and benchmarks. */
export interface StreamHubStats {
  /** Open streams. */
  clients: number;
  /** Emitters with at least one open stream. */
  emitters: number;
  /** Streams closed because their queue overflowed. */
  dropped: number;
  /** Event frames written or queued for a client (replayed and live). */
  frames: number;
}

/** One event, serialised and encoded once for every client of its channel. */
interface Frame {
  ms: number;
  seq: number;
  data: Buffer;
}

/** Renders an event as its complete SSE frame (`id:`, `data:`, blank line). */
export type FrameFormatter = (event: EventRecord) => string;

const keepaliveFrame = ":keepalive\n\n";

function isAfter(e: { ms: number; seq: number }, last: EventIdParts | undefined): boolean {
  return last === undefined || e.ms > last.ms || (e.ms === last.ms && e.seq > last.seq);
}

export class StreamHub {
  readonly #format: FrameFormatter;
  readonly #options: StreamHubOptions;
  readonly #byEmitter = new Map<string, Map<string, Set<StreamClient>>>();
  readonly #unsubscribe: () => void;
  #clients = 0;
  #dropped = 0;
  #frames = 0;
  #keepalive: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(bus: Bus, format: FrameFormatter, options: Partial<StreamHubOptions> = {}) {
    this.#format = format;
    this.#options = { ...defaultStreamHubOptions, ...options };
    const offStored = bus.on("event.stored", (e) => this.#publish(e));
    const offReplicated = bus.on("event.replicated", (e) => this.#publish(e));
    const offDeleted = bus.on("source.deleted", ({ sourceId }) => this.endEmitter(sourceId));
    this.#unsubscribe = () => {
      offStored();
      offReplicated();
      offDeleted();
    };
  }

  get options(): Readonly<StreamHubOptions> {
    return this.#options;
  }

  /** Changes tunables; applies to open streams at their next write and restarts the keep-alive timer. */
  configure(options: Partial<StreamHubOptions>): void {
    Object.assign(this.#options, options);
    this.#stopKeepalive();
    if (this.#clients > 0) this.#startKeepalive();
  }

  /**
   * Opens a stream of `emitterId`'s `channel` onto `sink`. Live events are held from this moment on, so
   * call it before reading stored events; then `start(stored)` sends those and goes live at the seam.
   * `after` is the client's Last-Event-ID: nothing at or before it is sent.
   */
  open(emitterId: string, channel: string, sink: Writable, after?: EventIdParts): StreamClient {
    if (this.#closed) throw new AppError("shutting_down");
    const client = new StreamClient(this, emitterId, channel, sink, after);
    let channels = this.#byEmitter.get(emitterId);
    if (!channels) {
      channels = new Map();
      this.#byEmitter.set(emitterId, channels);
    }
    let set = channels.get(channel);
    if (!set) {
      set = new Set();
      channels.set(channel, set);
    }
    set.add(client);
    this.#clients++;
    if (this.#clients === 1) this.#startKeepalive();
    return client;
  }

  /** Ends every stream of an emitter (its source was deleted); clients that reconnect get a 404. */
  endEmitter(emitterId: string): number {
    const channels = this.#byEmitter.get(emitterId);
    if (!channels) return 0;
    let n = 0;
    for (const set of [...channels.values()]) {
      for (const client of [...set]) {
        client.end();
        n++;
      }
    }
    return n;
  }

  /** Open streams. */
  size(): number {
    return this.#clients;
  }

  stats(): StreamHubStats {
    return {
      clients: this.#clients,
      emitters: this.#byEmitter.size,
      dropped: this.#dropped,
      frames: this.#frames,
    };
  }

  /** Ends every stream and stops listening; idempotent. Called before the server stops accepting. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#unsubscribe();
    for (const channels of [...this.#byEmitter.values()]) {
      for (const set of [...channels.values()]) for (const client of [...set]) client.end();
    }
    this.#stopKeepalive();
  }

  /** @internal Called by a client exactly once when it closes. */
  remove(client: StreamClient): void {
    const channels = this.#byEmitter.get(client.emitterId);
    const set = channels?.get(client.channel);
    if (!set?.delete(client)) return;
    this.#clients--;
    if (set.size === 0) channels!.delete(client.channel);
    if (channels!.size === 0) this.#byEmitter.delete(client.emitterId);
    if (this.#clients === 0) this.#stopKeepalive();
  }

  /** @internal */
  countDrop(): void {
    this.#dropped++;
  }

  /** @internal */
  countFrame(): void {
    this.#frames++;
  }

  /** @internal */
  frame(e: EventRecord): Frame {
    return { ms: e.idMs, seq: e.idSeq, data: Buffer.from(this.#format(e)) };
  }

  #publish(e: EventRecord): void {
    const set = this.#byEmitter.get(e.emitterId)?.get(e.channel);
    if (!set || set.size === 0) return;
    // Serialised once, whatever the number of clients.
    const frame = this.frame(e);
    for (const client of set) client.deliver(frame);
  }

  #startKeepalive(): void {
    if (this.#keepalive || this.#closed) return;
    this.#keepalive = setInterval(() => {
      for (const channels of this.#byEmitter.values()) {
        for (const set of channels.values()) for (const client of set) client.keepalive();
      }
    }, this.#options.keepaliveMs);
    // Open streams keep the process alive through their sockets; the timer alone must not.
    this.#keepalive.unref();
  }

  #stopKeepalive(): void {
    if (this.#keepalive) clearInterval(this.#keepalive);
    this.#keepalive = undefined;
  }
}

/** One open stream: replaying stored events, then live, then closed. */
export class StreamClient {
  readonly emitterId: string;
  readonly channel: string;
  readonly #hub: StreamHub;
  readonly #sink: Writable;
  #state: "replaying" | "live" | "closed" = "replaying";
  /** The newest event ID sent (or the client's Last-Event-ID); nothing at or before it is sent again. */
  #last: EventIdParts | undefined;
  /** Live events that arrived while stored ones were being sent. */
  #held: Frame[] = [];
  #heldBytes = 0;
  /** Frames waiting for the socket to drain (shared with other clients: only references are per client). */
  #queue: Buffer[] = [];
  #queuedBytes = 0;
  #waitingDrain = false;
  #stallTimer: NodeJS.Timeout | undefined;
  #drainWaiters: Array<() => void> = [];

  constructor(
    hub: StreamHub,
    emitterId: string,
    channel: string,
    sink: Writable,
    after: EventIdParts | undefined,
  ) {
    this.#hub = hub;
    this.emitterId = emitterId;
    this.channel = channel;
    this.#sink = sink;
    this.#last = after;
    sink.on("drain", this.#onDrain);
    sink.once("close", () => this.#closed());
    // A write to a vanished peer fails asynchronously; 'close' follows and cleans up.
    sink.on("error", () => this.#closed());
  }

  /**
   * Sends the opening comment (unless `preamble` is false: another client of the same socket, for
   * another channel, sent it) and `stored` (oldest first), pacing them by the socket's drain, then the
   * live events held meanwhile, skipping any already sent; from then on the stream is live.
   */
  async start(stored: EventRecord[], preamble = true): Promise<void> {
    if (this.#state !== "replaying") return;
    if (preamble) this.#write(`:ok\nretry: ${this.#hub.options.retryMs}\n\n`);
    for (const e of stored) {
      if (this.#state !== "replaying") return;
      if (!isAfter({ ms: e.idMs, seq: e.idSeq }, this.#last)) continue;
      this.#last = { ms: e.idMs, seq: e.idSeq };
      this.#hub.countFrame();
      // Stored events can be read at any pace: wait for the socket instead of queueing them.
      if (!this.#write(this.#hub.frame(e).data)) await this.#drained();
    }
    if (this.#state !== "replaying") return;
    this.#state = "live";
    const held = this.#held;
    this.#held = [];
    this.#heldBytes = 0;
    for (const frame of held) this.deliver(frame);
  }

  /** @internal A live event of this stream's channel. */
  deliver(frame: Frame): void {
    if (this.#state === "closed") return;
    if (this.#state === "replaying") {
      this.#held.push(frame);
      this.#heldBytes += frame.data.length;
      this.#checkBounds(this.#held.length, this.#heldBytes);
      return;
    }
    if (!isAfter(frame, this.#last)) return;
    this.#last = { ms: frame.ms, seq: frame.seq };
    this.#hub.countFrame();
    if (this.#waitingDrain) {
      this.#queue.push(frame.data);
      this.#queuedBytes += frame.data.length;
      this.#checkBounds(this.#queue.length, this.#queuedBytes);
      return;
    }
    this.#write(frame.data);
  }

  /** @internal */
  keepalive(): void {
    // A client behind on its writes gets events soon enough; one replaying gets them now.
    if (this.#state === "live" && !this.#waitingDrain) this.#write(keepaliveFrame);
  }

  /** Ends the stream cleanly after what is already written; a client stuck behind is cut off. */
  end(): void {
    if (this.#state === "closed") return;
    const stuck = this.#waitingDrain;
    this.#closed();
    if (stuck) this.#sink.destroy();
    else this.#sink.end();
  }

  /** Forgets the stream without touching its socket (the request failed before the stream began). */
  abandon(): void {
    this.#closed();
  }

  #checkBounds(events: number, bytes: number): void {
    const { maxQueuedEvents, maxQueuedBytes, stallMs } = this.#hub.options;
    if (events <= maxQueuedEvents && bytes <= maxQueuedBytes) return;
    if (events > maxQueuedEvents * hardBoundFactor || bytes > maxQueuedBytes * hardBoundFactor) {
      this.#drop();
      return;
    }
    this.#stallTimer ??= setTimeout(() => {
      this.#stallTimer = undefined;
      const [n, b] =
        this.#state === "replaying"
          ? [this.#held.length, this.#heldBytes]
          : [this.#queue.length, this.#queuedBytes];
      if (n > maxQueuedEvents || b > maxQueuedBytes) this.#drop();
    }, stallMs);
    this.#stallTimer.unref();
  }

  #drop(): void {
    if (this.#state === "closed") return;
    this.#hub.countDrop();
    this.#closed();
    this.#sink.destroy();
  }

  /** Writes now; false (and a wait for 'drain') when the socket's buffer is full. */
  #write(chunk: string | Buffer): boolean {
    if (this.#sink.destroyed || this.#sink.writableEnded) return true;
    const ok = this.#sink.write(chunk);
    if (!ok) this.#waitingDrain = true;
    return ok;
  }

  #onDrain = (): void => {
    this.#waitingDrain = false;
    if (this.#queue.length > 0) {
      const queue = this.#queue;
      this.#queue = [];
      this.#queuedBytes = 0;
      // Written frame by frame, not joined: the frames are shared between clients, a join would copy them.
      this.#sink.cork();
      let ok = true;
      for (const data of queue) ok = this.#write(data);
      this.#sink.uncork();
      if (!ok) return;
    }
    const waiters = this.#drainWaiters;
    this.#drainWaiters = [];
    for (const wake of waiters) wake();
  };

  #drained(): Promise<void> {
    if (!this.#waitingDrain || this.#state === "closed") return Promise.resolve();
    return new Promise((resolve) => this.#drainWaiters.push(resolve));
  }

  #closed(): void {
    if (this.#state === "closed") return;
    this.#state = "closed";
    this.#held = [];
    this.#queue = [];
    if (this.#stallTimer) clearTimeout(this.#stallTimer);
    this.#sink.off("drain", this.#onDrain);
    this.#hub.remove(this);
    const waiters = this.#drainWaiters;
    this.#drainWaiters = [];
    for (const wake of waiters) wake();
  }
}
