/**
 * Live fan-out of stored events to SSE clients: one `event.stored` listener for every client, an index
 * emitter → channel → clients, and per-client backpressure (stream-client.ts). The events stored in one
 * turn of the event loop (a group commit's) go out together: each channel's frames are serialised and
 * joined once, and every client gets them in one write, so 1,000 clients cost 1,000 socket writes per
 * commit rather than per event. A slow client costs a batch one array push, never a wait.
 */
import { AppError } from "../../errors.ts";
import type { Bus } from "../bus.ts";
import type { EventRecord } from "../types.ts";
import type { EventIdParts } from "./event-ids.ts";
import { type ClientHost, type Frame, joinFrames, StreamClient, type StreamSink } from "./stream-client.ts";

export { StreamClient, type StreamSink } from "./stream-client.ts";

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
  /** A replaying client whose socket takes nothing for this long is dropped (it holds a page meanwhile). */
  replayStallMs: number;
  /** How often an open stream's credentials and access to its source are checked again. */
  recheckMs: number;
  /** Streams one user may have open on this node at once (FOUNT_SSE_MAX_STREAMS). */
  maxStreamsPerUser: number;
  /**
   * Streams of one user replaying stored events on this node at once (FOUNT_SSE_MAX_REPLAYS); the rest
   * wait their turn before reading the store. Each holds a page of up to 4 MiB while its client reads.
   */
  maxReplaysPerUser: number;
}

export const defaultStreamHubOptions: StreamHubOptions = {
  keepaliveMs: 15_000,
  // The WHATWG default; sent explicitly so every client library waits the same.
  retryMs: 3_000,
  // 1,000 events or 4 MiB: a few seconds of a busy source, and room for four events of the 1 MiB maximum.
  maxQueuedEvents: 1_000,
  maxQueuedBytes: 4 * 1024 * 1024,
  stallMs: 1_000,
  replayStallMs: 30_000,
  recheckMs: 10_000,
  maxStreamsPerUser: 2_000,
  // 8 pages of 4 MiB: 32 MiB for one user's replays, where 2,000 streams held up to 32 GiB.
  maxReplaysPerUser: 8,
};

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

/** Renders an event as its complete SSE frame (`id:`, `data:`, blank line). */
export type FrameFormatter = (event: EventRecord) => string;

/** Frames of one emitter's channel stored in this turn, waiting for the flush. */
interface Pending {
  emitterId: string;
  channel: string;
  frames: Frame[];
}

export class StreamHub implements ClientHost {
  readonly #format: FrameFormatter;
  readonly #options: StreamHubOptions;
  readonly #byEmitter = new Map<string, Map<string, Set<StreamClient>>>();
  readonly #unsubscribe: () => void;
  #clients = 0;
  #dropped = 0;
  #frames = 0;
  #keepalive: NodeJS.Timeout | undefined;
  #closed = false;
  /** By emitter and channel (joined with U+0000, which neither may hold). */
  #pending = new Map<string, Pending>();

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
  open(emitterId: string, channel: string, sink: StreamSink, after?: EventIdParts): StreamClient {
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
    // Events stored before the deletion still reach the streams, before they end.
    this.#flush();
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
    this.#flush();
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
  countFrames(n: number): void {
    this.#frames += n;
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
    const key = `${e.emitterId}\u0000${e.channel}`;
    const pending = this.#pending.get(key);
    if (pending) pending.frames.push(frame);
    else {
      if (this.#pending.size === 0) process.nextTick(this.#flush);
      this.#pending.set(key, { emitterId: e.emitterId, channel: e.channel, frames: [frame] });
    }
  }

  /**
   * Sends what was published since the last flush: called at the end of the turn (after the group
   * commit's other callbacks, so a commit's events go together), and before streams are ended.
   */
  #flush = (): void => {
    if (this.#pending.size === 0) return;
    const pending = this.#pending;
    this.#pending = new Map();
    for (const { emitterId, channel, frames } of pending.values()) {
      // The clients of this moment: one that opened since the publish holds the frames until it is live.
      const set = this.#byEmitter.get(emitterId)?.get(channel);
      if (!set) continue;
      const joined = joinFrames(frames);
      for (const client of set) client.deliver(frames, joined);
    }
  };

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
