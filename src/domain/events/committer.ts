/**
 * Group commit: writes submitted within one event-loop turn share a transaction, which multiplies the
 * rows per second a single SQLite connection sustains (stack-measurements §2). A batch that fails is
 * retried job by job, so one bad job never fails the others.
 *
 * With `lingerMs`, a batch waits up to that long for the jobs announced with `expect()` (invocations
 * handed to an executor, whose results will be committed) before it commits, as PostgreSQL's own
 * `commit_delay` waits only while `commit_siblings` transactions are open: with nothing announced, a
 * batch commits at once, so a lone request pays nothing.
 */
import type { AsyncLocalStorage } from "node:async_hooks";
import { isStoreUnavailable } from "../../storage/health.ts";
import type { Storage, StorageOps } from "../../storage/port.ts";

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
  /**
   * How long a batch may wait for the jobs announced with `expect()` (ms; 0, the default, never waits).
   * Each commit's fixed cost (a round trip, BEGIN and COMMIT, the statements' planning) is then shared by
   * more jobs, and so is every stage before it, since the answers of one commit go out together.
   */
  lingerMs?: number;
}

export class Committer {
  readonly #store: Storage;
  readonly #maxBatch: number;
  readonly #carried: AsyncLocalStorage<unknown>[];
  readonly #observe: ((ms: number, jobs: number) => void) | undefined;
  readonly #lingerMs: number;
  /** Jobs announced with `expect()` and not yet submitted (or given up). */
  #expected = 0;
  /** Ends the wait of a lingering batch early: everything announced has arrived, or a batch is full. */
  #stopLinger: (() => void) | undefined;
  #queue: Job[] = [];
  #scheduled = false;
  #running: Promise<void> = Promise.resolve();

  constructor(store: Storage, options: CommitterOptions = {}) {
    this.#store = store;
    this.#maxBatch = options.maxBatch ?? 256;
    this.#carried = options.carried ?? [];
    this.#observe = options.observe;
    this.#lingerMs = options.lingerMs ?? 0;
  }

  /**
   * Announces a job that will be submitted soon (or never: call the returned function either way, once
   * it is submitted or given up; later calls do nothing). Batches wait for announced jobs up to `lingerMs`.
   */
  expect(): () => void {
    this.#expected += 1;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.#expected -= 1;
      if (this.#expected === 0) this.#stopLinger?.();
    };
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
      if (this.#queue.length >= this.#maxBatch) this.#stopLinger?.();
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

  /** Waits up to `lingerMs` while announced jobs are still to come and the batch has room. */
  async #linger(): Promise<void> {
    if (this.#lingerMs <= 0 || this.#expected === 0 || this.#queue.length >= this.#maxBatch) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => this.#stopLinger?.(), this.#lingerMs);
      this.#stopLinger = () => {
        clearTimeout(timer);
        this.#stopLinger = undefined;
        resolve();
      };
    });
  }

  async #flush(): Promise<void> {
    await this.#linger();
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
