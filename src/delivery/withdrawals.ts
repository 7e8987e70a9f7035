/**
 * Deliveries this node holds (claimed, waiting for a slot or for their listener) whose route was taken
 * away meanwhile: their subscription deleted, their listener deleted, or a membership that carried them
 * ended (bus event `deliveries.withdrawn`, from this node or, through the cluster, another). Each held
 * delivery is marked at once, and `verdict` tells the sender, just before its attempt, what to do: drop
 * it (its subscription is gone, and its row with it), read its listener again, or read its row again.
 * Deliveries started a little after the withdrawal (a claim or a commit under way when it was made) are
 * marked as they start. An attempt already in flight when the withdrawal came is not stopped.
 */
import type { Delivery } from "../domain/types.ts";

/** What was taken away (any of the three). */
export interface Withdrawal {
  /** Deleted subscriptions: their pending deliveries were deleted with them. */
  subscriptionIds?: string[];
  /** Deleted listeners: their deliveries are settled by the listener's next read. */
  listenerIds?: string[];
  /** Owners between whom routes were deleted (a member removed): their rows may be gone. */
  ownerIds?: string[];
}

/** `drop`: not to be sent; `listener`: read the listener again; `row`: read the delivery's row again. */
export type Verdict = "drop" | "listener" | "row";

/**
 * How long a withdrawal also marks deliveries that start after it: a claim (or a routing commit) under
 * way when it was made hands its deliveries over within this; no claim takes a withdrawn one later.
 */
export const withdrawalWindowMs = 60_000;
/** Owners' routes are checked for deliveries routed up to this long after the withdrawal (clocks differ). */
const routedMarginMs = 5_000;

export class HeldWithdrawals {
  readonly #now: () => number;
  /** Held deliveries, by ID. */
  readonly #held = new Map<string, Delivery>();
  /** The verdict on held deliveries that were marked. */
  readonly #marked = new Map<string, Verdict>();
  /** Recent withdrawals, by ID of what they took away, with when they were made. */
  readonly #subscriptions = new Map<string, number>();
  readonly #owners = new Map<string, number>();

  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  /** `d` is held from now until `forget` (its handling started). */
  track(d: Delivery): void {
    this.#held.set(d.id, d);
    if (this.#subscriptions.size === 0 && this.#owners.size === 0) return;
    this.#prune();
    if (this.#subscriptions.has(d.subscriptionId)) this.#marked.set(d.id, "drop");
    else {
      const at = this.#owners.get(d.ownerId);
      if (at !== undefined && d.indexedAtMs <= at + routedMarginMs) this.#marked.set(d.id, "row");
    }
  }

  /** `id` is no longer held. */
  forget(id: string): void {
    this.#held.delete(id);
    if (this.#marked.size > 0) this.#marked.delete(id);
  }

  /** Just before an attempt: what to do with `id` instead (undefined: send it). An in-memory lookup. */
  verdict(id: string): Verdict | undefined {
    return this.#marked.size === 0 ? undefined : this.#marked.get(id);
  }

  /** After a `row` or `listener` verdict was acted on and the delivery is still to be sent. */
  cleared(id: string): void {
    this.#marked.delete(id);
  }

  /** Marks the held deliveries `w` took away; remembers it a while for those about to start. */
  withdraw(w: Withdrawal): number {
    const now = this.#now();
    const subs = new Set(w.subscriptionIds ?? []);
    const listeners = new Set(w.listenerIds ?? []);
    const owners = new Set(w.ownerIds ?? []);
    // Deleted first, so that each map stays oldest first (`#prune`).
    for (const [ids, recent] of [
      [subs, this.#subscriptions],
      [owners, this.#owners],
    ] as const)
      for (const id of ids) {
        recent.delete(id);
        recent.set(id, now);
      }
    this.#prune();
    let marked = 0;
    for (const d of this.#held.values()) {
      const verdict: Verdict | undefined = subs.has(d.subscriptionId)
        ? "drop"
        : listeners.has(d.listenerId)
          ? "listener"
          : owners.has(d.ownerId)
            ? "row"
            : undefined;
      if (verdict === undefined || this.#marked.get(d.id) === "drop") continue;
      this.#marked.set(d.id, verdict);
      marked++;
    }
    return marked;
  }

  #prune(): void {
    const before = this.#now() - withdrawalWindowMs;
    for (const recent of [this.#subscriptions, this.#owners])
      for (const [id, at] of recent) {
        // Oldest first (insertion order): the rest are younger.
        if (at >= before) break;
        recent.delete(id);
      }
  }
}
