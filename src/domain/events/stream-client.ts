/**
 * One open SSE stream of the stream hub (stream-hub.ts): it replays stored events, then goes live, and
 * keeps its own backpressure. Live events come in batches whose bytes were joined once for every client
 * (one write per client per batch); a client whose socket stops draining queues references to them and
 * is dropped when it stays over the bound (it reconnects with Last-Event-ID and replays from the store).
 */
import type { EventRecord } from "../types.ts";
import type { EventIdParts } from "./event-ids.ts";

/** One event, serialised and encoded once for every client of its channel. */
export interface Frame {
  ms: number;
  seq: number;
  data: Buffer;
}

/**
 * Where a stream's bytes go: a `Writable`, or the route's sink that writes an HTTP response's chunks
 * to its socket (http/sse-sink.ts). Several streams of one socket (one per channel) share it.
 */
export interface StreamSink {
  /** False when the peer is behind: wait for 'drain'. */
  write(chunk: Buffer | string): boolean;
  end(): void;
  destroy(): void;
  cork(): void;
  uncork(): void;
  readonly destroyed: boolean;
  readonly writableEnded: boolean;
  on(event: "drain" | "close" | "error", listener: () => void): unknown;
  once(event: "close", listener: () => void): unknown;
  off(event: "drain", listener: () => void): unknown;
}

/** Queue bounds of a client (the hub's tunables, read at each check). */
export interface QueueBounds {
  retryMs: number;
  maxQueuedEvents: number;
  maxQueuedBytes: number;
  stallMs: number;
  replayStallMs: number;
}

/** What a client needs of its hub. */
export interface ClientHost {
  readonly options: Readonly<QueueBounds>;
  frame(e: EventRecord): Frame;
  /** The client closed (exactly once). */
  remove(client: StreamClient): void;
  countDrop(): void;
  countFrames(n: number): void;
}

/** Over this many times a queue bound, a client is dropped without waiting for `stallMs`. */
const hardBoundFactor = 4;

const keepaliveFrame = Buffer.from(":keepalive\n\n");

function isAfter(e: { ms: number; seq: number }, last: EventIdParts | undefined): boolean {
  return last === undefined || e.ms > last.ms || (e.ms === last.ms && e.seq > last.seq);
}

/** The frames' bytes as one buffer: the first frame's own when there is one. */
export function joinFrames(frames: readonly Frame[]): Buffer {
  return frames.length === 1 ? frames[0]!.data : Buffer.concat(frames.map((f) => f.data));
}

/** One open stream: replaying stored events, then live, then closed. */
export class StreamClient {
  readonly emitterId: string;
  readonly channel: string;
  readonly #hub: ClientHost;
  readonly #sink: StreamSink;
  #state: "replaying" | "live" | "closed" = "replaying";
  /** The newest event ID sent (or the client's Last-Event-ID); nothing at or before it is sent again. */
  #last: EventIdParts | undefined;
  /** Live events that arrived while stored ones were being sent. */
  #held: Frame[] = [];
  #heldBytes = 0;
  /** Batches waiting for the socket to drain (shared with other clients: only references are per client). */
  #queue: Buffer[] = [];
  #queuedEvents = 0;
  #queuedBytes = 0;
  #waitingDrain = false;
  #stallTimer: NodeJS.Timeout | undefined;
  #drainWaiters: Array<() => void> = [];

  constructor(
    hub: ClientHost,
    emitterId: string,
    channel: string,
    sink: StreamSink,
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
   * another channel, sent it) and `stored` (oldest first: the events, or pages of them read as they are
   * sent), pacing them by the socket's drain, then the live events held meanwhile, skipping any already
   * sent; from then on the stream is live. A page that fails to be read rejects, the stream still replaying.
   */
  async start(stored: EventRecord[] | AsyncIterable<EventRecord[]>, preamble = true): Promise<void> {
    if (this.#state !== "replaying") return;
    if (preamble) this.#write(`:ok\nretry: ${this.#hub.options.retryMs}\n\n`);
    for await (const page of Array.isArray(stored) ? [stored] : stored) {
      for (const e of page) {
        if (this.#state !== "replaying") return;
        if (!isAfter({ ms: e.idMs, seq: e.idSeq }, this.#last)) continue;
        this.#last = { ms: e.idMs, seq: e.idSeq };
        this.#hub.countFrames(1);
        // Stored events can be read at any pace: wait for the socket instead of queueing them, but not
        // for ever (the page waits in memory meanwhile).
        if (
          !this.#write(this.#hub.frame(e).data) &&
          !(await this.#drainedWithin(this.#hub.options.replayStallMs))
        ) {
          this.#drop();
          return;
        }
      }
    }
    if (this.#state !== "replaying") return;
    this.#state = "live";
    const held = this.#held;
    this.#held = [];
    this.#heldBytes = 0;
    if (held.length > 0) this.deliver(held);
  }

  /**
   * @internal Live events of this stream's channel, oldest first; `joined` is their bytes as one buffer
   * (`joinFrames`), shared by every client of the channel.
   */
  deliver(frames: readonly Frame[], joined?: Buffer): void {
    if (this.#state === "closed") return;
    if (this.#state === "replaying") {
      for (const frame of frames) {
        this.#held.push(frame);
        this.#heldBytes += frame.data.length;
      }
      this.#checkBounds(this.#held.length, this.#heldBytes);
      return;
    }
    // Usually every frame is new to the client; one that went live in this batch may have some already.
    let fresh: Frame[] | undefined;
    for (const [i, frame] of frames.entries()) {
      if (isAfter(frame, this.#last)) {
        this.#last = { ms: frame.ms, seq: frame.seq };
        fresh?.push(frame);
      } else fresh ??= frames.slice(0, i);
    }
    const sent = fresh ?? frames;
    if (sent.length === 0) return;
    const data = fresh || !joined ? joinFrames(sent) : joined;
    this.#hub.countFrames(sent.length);
    if (this.#waitingDrain) {
      this.#queue.push(data);
      this.#queuedEvents += sent.length;
      this.#queuedBytes += data.length;
      this.#checkBounds(this.#queuedEvents, this.#queuedBytes);
      return;
    }
    this.#write(data);
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
          : [this.#queuedEvents, this.#queuedBytes];
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
      this.#queuedEvents = 0;
      this.#queuedBytes = 0;
      // Written batch by batch, not joined: the batches are shared between clients, a join would copy them.
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

  /** Whether the socket drained (or the stream closed) within `ms`. */
  #drainedWithin(ms: number): Promise<boolean> {
    if (!this.#waitingDrain || this.#state === "closed") return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), ms);
      this.#drainWaiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
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
