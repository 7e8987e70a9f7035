/**
 * A FIFO async mutex: one holder at a time, in arrival order. The SQLite driver and the component
 * registry both use it, so it sits with the base modules, below the domain and the storage.
 */
export class AsyncLock {
  #tail: Promise<unknown> = Promise.resolve();

  run<T>(fn: () => Promise<T> | T): Promise<T> {
    const result = this.#tail.then(fn);
    // The chain must continue whether fn resolved or threw.
    this.#tail = result.catch(() => undefined);
    return result;
  }

  /** Resolves once everything queued so far has finished. */
  idle(): Promise<void> {
    return this.#tail.then(() => undefined);
  }
}
