/**
 * The send slots: how many deliveries this node sends at once, all destinations together
 * (`maxConcurrency`), to one destination (`maxPerHost`) and for one owner (`maxPerOwner`). A delivery
 * that may not send yet waits here for a slot, and waiting deliveries of one owner to one host get their
 * slots in claim order, so that a subscription's deliveries to one host go out in the order they were
 * claimed.
 */
import type { DispatcherOptions } from "./options.ts";
import { adjust } from "./tally.ts";

/** One owner's deliveries to one destination: the unit whose claim order is kept. */
const laneOf = (key: string, owner: string) => `${owner}\u0000${key}`;

export class SendSlots {
  readonly #options: DispatcherOptions;
  readonly #stopped: () => boolean;
  #sending = 0;
  /** In-flight deliveries per destination key. */
  readonly #perKey = new Map<string, number>();
  /**
   * In-flight deliveries per owner: without this bound one owner's slow destinations (four ports of a
   * host that never answers) took every slot of the node for 15 s at a time.
   */
  readonly #perOwner = new Map<string, number>();
  /** Deliveries waiting for a slot, oldest first; `start(false)` means the dispatcher is stopping. */
  #waiters: Array<{ key: string; owner: string; start: (ok: boolean) => void }> = [];
  readonly #waitingPerKey = new Map<string, number>();
  readonly #waitingPerLane = new Map<string, number>();

  /** `stopped` tells whether the dispatcher is stopping: a slot asked for then is refused. */
  constructor(options: DispatcherOptions, stopped: () => boolean) {
    this.#options = options;
    this.#stopped = stopped;
  }

  #fits(key: string, owner: string): boolean {
    return (
      this.#sending < this.#options.maxConcurrency &&
      (this.#perKey.get(key) ?? 0) < this.#options.maxPerHost &&
      (this.#perOwner.get(owner) ?? 0) < this.#options.maxPerOwner
    );
  }

  /** Whether `owner`'s delivery to `key` may be sent now, with none of theirs to it waiting before it. */
  canSend(key: string, owner: string): boolean {
    return this.#fits(key, owner) && !this.#waitingPerLane.get(laneOf(key, owner));
  }

  /** Deliveries of `key` being sent or waiting for a slot. */
  busy(key: string): number {
    return (this.#perKey.get(key) ?? 0) + (this.#waitingPerKey.get(key) ?? 0);
  }

  #take(key: string, owner: string): void {
    this.#sending++;
    adjust(this.#perKey, key, 1);
    adjust(this.#perOwner, owner, 1);
  }

  /** Resolves true once a slot of `key` is this delivery's (in claim order), false when stopping. */
  acquire(key: string, owner: string): Promise<boolean> {
    if (this.#stopped()) return Promise.resolve(false);
    if (this.canSend(key, owner)) {
      this.#take(key, owner);
      return Promise.resolve(true);
    }
    adjust(this.#waitingPerKey, key, 1);
    adjust(this.#waitingPerLane, laneOf(key, owner), 1);
    return new Promise((start) => this.#waiters.push({ key, owner, start }));
  }

  /** Frees a slot of `key` and `owner` and hands slots to the oldest waiters that may now send. */
  release(key: string, owner: string): void {
    this.#sending--;
    adjust(this.#perKey, key, -1);
    adjust(this.#perOwner, owner, -1);
    // A waiter that may not send blocks only the later ones of its lane (the same limits hold them),
    // so another owner's delivery, or another host's, goes past it.
    for (let i = 0; i < this.#waiters.length && this.#sending < this.#options.maxConcurrency; i++) {
      const w = this.#waiters[i]!;
      if (!this.#fits(w.key, w.owner)) continue;
      this.#waiters.splice(i, 1);
      i--;
      adjust(this.#waitingPerKey, w.key, -1);
      adjust(this.#waitingPerLane, laneOf(w.key, w.owner), -1);
      this.#take(w.key, w.owner);
      w.start(true);
    }
  }

  /** Stopping: every delivery waiting for a slot is told it gets none (it stays pending). */
  refuseWaiters(): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    this.#waitingPerKey.clear();
    this.#waitingPerLane.clear();
    for (const w of waiters) w.start(false);
  }
}
