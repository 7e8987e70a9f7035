/**
 * A map for caches whose misses are cheap to refill: when it holds `max` entries, adding another one
 * starts it over, so that no stream of distinct keys (endpoint probes, rotated secrets) grows it.
 */
export class BoundedCache<K, V> {
  readonly #max: number;
  readonly #entries = new Map<K, V>();

  constructor(max: number) {
    this.#max = max;
  }

  get(key: K): V | undefined {
    return this.#entries.get(key);
  }

  set(key: K, value: V): void {
    if (this.#entries.size >= this.#max && !this.#entries.has(key)) this.#entries.clear();
    this.#entries.set(key, value);
  }

  /** The cached value of `key`, computed and kept on a miss. */
  getOrSet(key: K, compute: () => V): V {
    let value = this.#entries.get(key);
    if (value === undefined) {
      value = compute();
      this.set(key, value);
    }
    return value;
  }

  delete(key: K): void {
    this.#entries.delete(key);
  }

  clear(): void {
    this.#entries.clear();
  }
}
