/**
 * The send slots: how many deliveries this node sends at once, all destinations together
 * (`maxConcurrency`) and to one destination (`maxPerHost`). A delivery whose destination is full waits
 * here for a slot, and waiting deliveries get their slots in claim order, so that a subscription's
 * deliveries to one host go out in the order they were claimed.
 */
import type { DispatcherOptions } from "./options.ts";
import { adjust } from "./tally.ts";

export class SendSlots {
  readonly #options: DispatcherOptions;
  readonly #stopped: () => boolean;
  #sending = 0;
  /** In-flight deliveries per destination key. */
  readonly #perKey = new Map<string, number>();
  /** Deliveries waiting for a slot, oldest first; `start(false)` means the dispatcher is stopping. */
  #waiters: Array<{ key: string; start: (ok: boolean) => void }> = [];
  readonly #waitingPerKey = new Map<string, number>();

  /** `stopped` tells whether the dispatcher is stopping: a slot asked for then is refused. */
  constructor(options: DispatcherOptions, stopped: () => boolean) {
    this.#options = options;
    this.#stopped = stopped;
  }

  /** Whether a delivery to `key` may be sent now, with nobody of its destination waiting before it. */
  canSend(key: string): boolean {
    return (
      this.#sending < this.#options.maxConcurrency &&
      (this.#perKey.get(key) ?? 0) < this.#options.maxPerHost &&
      !this.#waitingPerKey.get(key)
    );
  }

  /** Deliveries of `key` being sent or waiting for a slot. */
  busy(key: string): number {
    return (this.#perKey.get(key) ?? 0) + (this.#waitingPerKey.get(key) ?? 0);
  }

  #take(key: string): void {
    this.#sending++;
    adjust(this.#perKey, key, 1);
  }

  /** Resolves true once a slot of `key` is this delivery's (in claim order), false when stopping. */
  acquire(key: string): Promise<boolean> {
    if (this.#stopped()) return Promise.resolve(false);
    if (this.canSend(key)) {
      this.#take(key);
      return Promise.resolve(true);
    }
    adjust(this.#waitingPerKey, key, 1);
    return new Promise((start) => this.#waiters.push({ key, start }));
  }

  /** Frees a slot of `key` and hands slots to the oldest waiters that may now send. */
  release(key: string): void {
    this.#sending--;
    adjust(this.#perKey, key, -1);
    for (let i = 0; i < this.#waiters.length && this.#sending < this.#options.maxConcurrency; i++) {
      const w = this.#waiters[i]!;
      if ((this.#perKey.get(w.key) ?? 0) >= this.#options.maxPerHost) continue;
      this.#waiters.splice(i, 1);
      i--;
      adjust(this.#waitingPerKey, w.key, -1);
      this.#take(w.key);
      w.start(true);
    }
  }

  /** Stopping: every delivery waiting for a slot is told it gets none (it stays pending). */
  refuseWaiters(): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const w of waiters) w.start(false);
  }
}
