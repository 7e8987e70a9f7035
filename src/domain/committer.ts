/**
 * Group commit: writes submitted within one event-loop turn share a transaction, which multiplies the
 * rows per second a single SQLite connection sustains (stack-measurements §2). A batch that fails is
 * retried job by job, so one bad job never fails the others.
 */
import type { AsyncLocalStorage } from "node:async_hooks";
import { isStoreUnavailable } from "../storage/health.ts";
import type { Storage, StorageOps } from "../storage/port.ts";

interface Job {
  run: (tx: StorageOps) => Promise<unknown>;
  resolve: (value: unknown) => void;
  reject: (err: unknown) => void;
  /** Runs after the job's transaction committed (publishing to the bus). */
  after?: () => void;
}

export interface CommitterOptions {
  /** Jobs per transaction. */
  maxBatch?: number;
  /**
   * Async-local stores a job sees as its submitter set them, not as the first job of its batch did
   * (event routing reads the delivery hop count this way).
   */
  carried?: AsyncLocalStorage<unknown>[];
  /** Told how long each transaction took to commit, and how many jobs it held (metrics). */
  observe?: (ms: number, jobs: number) => void;
}

export class Committer {
  readonly #store: Storage;
  readonly #maxBatch: number;
  readonly #carried: AsyncLocalStorage<unknown>[];
  readonly #observe: ((ms: number, jobs: number) => void) | undefined;
  #queue: Job[] = [];
  #scheduled = false;
  #running: Promise<void> = Promise.resolve();

  constructor(store: Storage, options: CommitterOptions = {}) {
    this.#store = store;
    this.#maxBatch = options.maxBatch ?? 256;
    this.#carried = options.carried ?? [];
    this.#observe = options.observe;
  }

  /** Runs `fn` in a shared transaction; resolves once committed. `after` runs post-commit. */
  submit<T>(fn: (tx: StorageOps) => Promise<T>, after?: (value: T) => void): Promise<T> {
    // Only the carried stores' values are kept, not a snapshot of the whole async context: a snapshot
    // per job costs an AsyncResource, which under load outlives young-generation collections.
    const values = this.#carried.map((s) => s.getStore());
    return new Promise<T>((resolve, reject) => {
      let result: T;
      this.#queue.push({
        run: async (tx) => {
          result = await this.#inContext(values, () => fn(tx));
          return result;
        },
        resolve: resolve as (v: unknown) => void,
        reject,
        after: after ? () => after(result) : undefined,
      });
      if (!this.#scheduled) {
        this.#scheduled = true;
        setImmediate(() => {
          this.#running = this.#running.then(() => this.#flush());
        });
      }
    });
  }

  /** Runs `fn` with the carried stores set to `values`, entering only those that differ. */
  #inContext<R>(values: unknown[], fn: () => R): R {
    let run = fn;
    this.#carried.forEach((s, i) => {
      const value = values[i];
      if (s.getStore() === value) return;
      const inner = run;
      run = () => (value === undefined ? s.exit(inner) : s.run(value, inner));
    });
    return run();
  }

  /** Resolves once everything submitted so far is committed or failed. */
  async drain(): Promise<void> {
    while (this.#queue.length > 0 || this.#scheduled) {
      await new Promise((r) => setImmediate(r));
      await this.#running;
    }
    await this.#running;
  }

  async #flush(): Promise<void> {
    this.#scheduled = false;
    while (this.#queue.length > 0) {
      const batch = this.#queue.splice(0, this.#maxBatch);
      const results: unknown[] = [];
      try {
        const t0 = performance.now();
        await this.#store.transaction(async (tx) => {
          results.length = 0;
          for (const job of batch) results.push(await job.run(tx));
        });
        this.#observe?.(performance.now() - t0, batch.length);
        batch.forEach((job, i) => {
          job.after?.();
          job.resolve(results[i]);
        });
      } catch (err) {
        // The store is out of reach: no job is to blame, and each alone would fail the same way.
        if (isStoreUnavailable(err)) {
          for (const job of batch) job.reject(err);
          continue;
        }
        // Find the culprit: each job alone, in order.
        for (const job of batch) {
          try {
            const value = await this.#store.transaction((tx) => job.run(tx));
            job.after?.();
            job.resolve(value);
          } catch (err) {
            job.reject(err);
          }
        }
      }
    }
  }
}
