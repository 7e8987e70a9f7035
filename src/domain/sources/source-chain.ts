/**
 * The per-source chain of the runner: invocations of one source are handed to the executor one after
 * another, in call order, each once the previous one's hand-over settled. Only the hand-over is chained,
 * not the run: the executor runs a source's invocations one at a time and lets each see the previous
 * one's db writes, while the next is already queued (pipelining instead of one IPC round trip each).
 * The endpoint hits so queued are bounded per source (`HitBacklog`).
 */
import type { Config } from "../../config.ts";
import { AppError } from "../../errors.ts";

const ignore = (): undefined => undefined;

export class SourceChain {
  /** Per source, the hand-over of its last invocation, settled either way; gone once nothing follows it. */
  readonly #tails = new Map<string, Promise<unknown>>();

  /** Runs `step` once the source's previous step settled; its result, as `step` gives it. */
  next<T>(sourceId: string, step: () => Promise<T>): Promise<T> {
    const previous = this.#tails.get(sourceId) ?? Promise.resolve();
    const handOver = previous.catch(ignore).then(step);
    const settled = handOver.then(ignore, ignore);
    this.#tails.set(sourceId, settled);
    void settled.then(() => {
      if (this.#tails.get(sourceId) === settled) this.#tails.delete(sourceId);
    });
    return handOver;
  }
}

/** The bound of `HitBacklog`, read at each hit (tests change settings on a running server). */
export type BacklogLimits = Pick<Config, "maxQueuedHits" | "maxQueuedHitBytes">;

/**
 * Endpoint hits of each source held on this node, from their quota check until their run settled:
 * each keeps its body (twice: the bytes and their text) until then, and a source that runs slower than
 * its hits arrive would otherwise gather them without end. Past the bound a hit is refused with 429.
 */
export class HitBacklog {
  readonly #held = new Map<string, { hits: number; bytes: number }>();
  readonly #limits: BacklogLimits;

  constructor(limits: BacklogLimits) {
    this.#limits = limits;
  }

  /** Throws `rate_limited` when the source has no room for one more hit of `bytes`. */
  #check(sourceId: string, bytes: number): void {
    const held = this.#held.get(sourceId);
    // One hit is always let in, whatever its size within the body limit: an idle source takes any.
    if (held === undefined) return;
    const { maxQueuedHits, maxQueuedHitBytes } = this.#limits;
    if (held.hits < maxQueuedHits && held.bytes + bytes <= maxQueuedHitBytes) return;
    throw new AppError(
      "rate_limited",
      `This source has ${held.hits} requests waiting for their run on this node, as many as it may hold; retry shortly`,
      // The backlog drains at the pace of the source's own runs, unknown here: a short wait spreads retries.
      { headers: { "retry-after": "1" } },
    );
  }

  /** Counts a hit of `bytes` in the source's backlog, or throws `rate_limited`; the result gives it back. */
  admit(sourceId: string, bytes: number): () => void {
    this.#check(sourceId, bytes);
    const held = this.#held.get(sourceId) ?? { hits: 0, bytes: 0 };
    held.hits++;
    held.bytes += bytes;
    this.#held.set(sourceId, held);
    let given = false;
    return () => {
      if (given) return;
      given = true;
      held.hits--;
      held.bytes -= bytes;
      if (held.hits === 0) this.#held.delete(sourceId);
    };
  }
}
