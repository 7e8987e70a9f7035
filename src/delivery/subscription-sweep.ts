/**
 * Deletes, a batch a transaction, the pending deliveries that deleted subscriptions left marked (a backlog
 * past the batch the delete itself took: `sweepDeletedSubscriptions`, subscription-deletes.ts). Other
 * writers (every tenant's ingest) go between batches. A delete with more left kicks it; so does a start,
 * for what a restart interrupted. Two nodes sweeping at once delete each other's batches, no row twice.
 */
import type { Storage } from "../storage/port.ts";

export class SubscriptionSweep {
  readonly #store: Storage;
  readonly #onError: (err: unknown) => void;
  /** The sweep under way, if any. */
  #running: Promise<void> | undefined;
  /** A kick arrived while sweeping: look again once it ends. */
  #again = false;
  #stopped = false;

  constructor(store: Storage, onError: (err: unknown) => void) {
    this.#store = store;
    this.#onError = onError;
  }

  /** Sweeps until no mark is left (or joins the sweep under way); a failure is reported, not retried. */
  kick(): void {
    if (this.#stopped) return;
    if (this.#running) {
      this.#again = true;
      return;
    }
    this.#running = this.#sweep()
      .catch((err: unknown) => this.#onError(err))
      .finally(() => {
        this.#running = undefined;
        if (this.#again) {
          this.#again = false;
          this.kick();
        }
      });
  }

  /** Ends the sweep after its batch; a later start resumes from the marks. */
  async stop(): Promise<void> {
    this.#stopped = true;
    await this.#running;
  }

  async #sweep(): Promise<void> {
    while (!this.#stopped && (await this.#store.transaction((tx) => tx.sweepDeletedSubscriptions()))) {
      // Other work first between batches, as the pruner does.
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  }
}
