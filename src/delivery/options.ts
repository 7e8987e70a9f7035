/**
 * The delivery dispatcher's settings and their defaults. Apart from the dispatcher because its parts
 * (claims, send slots, sending) read the same options object: tests change it on a running dispatcher
 * (a shorter timeout, a pinned jitter), so every part reads a setting when it uses it.
 */

export interface DispatcherOptions {
  /** Deliveries in flight at once, all destinations together. */
  maxConcurrency: number;
  /** Deliveries in flight at once to one host (one listener source counts as one host). */
  maxPerHost: number;
  /**
   * Deliveries claimed ahead and waiting in memory for a slot of their host, per host, in flight ones
   * included: claiming in batches keeps a busy destination's queue moving without a claim per delivery.
   */
  maxHeldPerHost: number;
  /** Deliveries claimed and not finished, all destinations together (in flight and waiting). */
  maxHeld: number;
  /**
   * Deliveries of one owner in flight at once, all their destinations together
   * (`FOUNT_DELIVERY_MAX_PER_OWNER`): the rest of `maxConcurrency` stays free for the other owners.
   */
  maxPerOwner: number;
  /** Deliveries of one owner claimed and not finished (in flight and waiting): the rest of `maxHeld` is the others'. */
  maxHeldPerOwner: number;
  /** Least time between two claims, so that a stream of wake-ups cannot turn into a stream of queries. */
  minClaimGapMs: number;
  /** How long one HTTP attempt may take, answer included. */
  timeoutMs: number;
  /**
   * A claim's lease outlasts one attempt (`timeoutMs`) by this much, so that a node that stalls between
   * renewals (a long GC pause, a slow commit) does not lose its claims to another node.
   */
  leaseMarginMs: number;
  /** Longest sleep between looks for due retries. */
  pollMs: number;
  /** Finished deliveries are kept this long for the deliveries API, then pruned. */
  retentionMs: number;
  /** Finished deliveries past `retentionMs` deleted per statement. */
  pruneBatch: number;
  /**
   * Finished deliveries deleted per second at most: after each batch the pruner waits at least as long
   * as keeps it within this rate, and at least as long as the batch took.
   */
  pruneRate: number;
  /**
   * Parked deliveries of a listener made active again (or deleted) made due per statement; after each
   * batch the unparker waits as long as the batch took.
   */
  unparkBatch: number;
  /** [0, 1) for the retry jitter; tests pin it. */
  random: () => number;
}

export const defaultDispatcherOptions: DispatcherOptions = {
  // Measured with npm run bench: 8 per host left a healthy local receiver at ~1,000 deliveries/s,
  // since each request waits on the busy event loop; 32 per host (128 sockets in all) keeps it fed
  // while several destinations still share the sockets.
  maxConcurrency: 128,
  maxPerHost: 32,
  maxHeldPerHost: 128,
  maxHeld: 512,
  // One owner may use a quarter of the sends and of the held deliveries: others always find slots,
  // and one owner's single busy host still gets as many sockets as `maxPerHost` allows.
  maxPerOwner: 32,
  maxHeldPerOwner: 128,
  minClaimGapMs: 2,
  timeoutMs: 15_000,
  leaseMarginMs: 30_000,
  pollMs: 1_000,
  retentionMs: 7 * 24 * 3_600_000,
  // A batch of 1,000 takes about 5 ms on SQLite (each delivery with its attempts and five indexes), so
  // other work waits that long at most; 20,000 a second keeps up with more than this machine delivers.
  pruneBatch: 1_000,
  pruneRate: 20_000,
  // A batch of 500 takes about 1.6 ms on SQLite (p99 3.7 ms, 100,000 parked): 100,000 in about 0.8 s.
  unparkBatch: 500,
  random: Math.random,
};
