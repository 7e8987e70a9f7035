/**
 * What nodes say to each other over the cluster channel (cluster-link.ts), and how long a stream's
 * announcement of interest lasts.
 */
import type { EventRecord } from "../types.ts";
import type { LeaseMessage } from "./source-leases.ts";

/** How streams' interest travels between nodes (tests shorten it). */
export interface InterestTimings {
  /** An announcement of streamed emitters is trusted this long (ms). */
  ttlMs: number;
  /** A node announces the emitters it streams this often (ms). */
  refreshMs: number;
  /** A new stream waits at most this long for the other nodes' confirmations (ms). */
  ackTimeoutMs: number;
}

export const defaultInterestTimings: InterestTimings = {
  ttlMs: 15_000,
  refreshMs: 5_000,
  ackTimeoutMs: 1_000,
};

/** What goes over the channel; `n` is the sending node. */
export type Message =
  | ({ n: string } & LeaseMessage)
  | { n: string; t: "events"; e: EventRecord[] }
  | { n: string; t: "event-ref"; r: Array<[emitterId: string, channel: string, ms: number, seq: number]> }
  | { n: string; t: "deleted"; s: string }
  /**
   * Access was revoked (`u`: whose; absent: anyone's): streams check theirs at once. The receiver forgets
   * its cached keys and memberships first, since the sender's `stale` may arrive after this.
   */
  | { n: string; t: "revoked"; u?: string }
  | { n: string; t: "stale"; k: string[] }
  /** Emitters the sender streams; `a` asks every receiver to confirm with an `ack`. */
  | { n: string; t: "watch"; e: string[]; a?: string }
  | { n: string; t: "ack"; a: string; to: string }
  /** Deliveries to a source another node runs were queued: claim them (they are left to it). */
  | { n: string; t: "wake" };
