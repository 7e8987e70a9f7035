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

/**
 * A least-recently-used map bounded by the bytes of its values, for caches whose values differ a
 * thousandfold in size (a source's props, a component's code): a count alone lets a few thousand large
 * ones take the heap. Each value's size is estimated once, when it is added (`sizeOf`); past `maxBytes`
 * (or `maxEntries`) the least recently read or added values are let go. A value larger than `maxBytes`
 * is not kept at all.
 */
export class ByteBoundedCache<K, V> {
  readonly #maxBytes: number;
  readonly #maxEntries: number;
  readonly #sizeOf: (value: V) => number;
  /** Least recently used first (a read moves an entry last). */
  readonly #entries = new Map<K, { value: V; bytes: number }>();
  #bytes = 0;

  constructor(options: { maxBytes: number; sizeOf: (value: V) => number; maxEntries?: number }) {
    this.#maxBytes = options.maxBytes;
    this.#maxEntries = options.maxEntries ?? Number.POSITIVE_INFINITY;
    this.#sizeOf = options.sizeOf;
  }

  /** The estimated bytes of the values kept now. */
  get bytes(): number {
    return this.#bytes;
  }

  get size(): number {
    return this.#entries.size;
  }

  get(key: K): V | undefined {
    const entry = this.#entries.get(key);
    if (entry === undefined) return undefined;
    this.#entries.delete(key);
    this.#entries.set(key, entry);
    return entry.value;
  }

  set(key: K, value: V): void {
    this.delete(key);
    const bytes = this.#sizeOf(value);
    if (bytes > this.#maxBytes) return;
    this.#entries.set(key, { value, bytes });
    this.#bytes += bytes;
    for (const [oldest, entry] of this.#entries) {
      if (this.#bytes <= this.#maxBytes && this.#entries.size <= this.#maxEntries) break;
      this.#entries.delete(oldest);
      this.#bytes -= entry.bytes;
    }
  }

  delete(key: K): void {
    const entry = this.#entries.get(key);
    if (entry === undefined) return;
    this.#entries.delete(key);
    this.#bytes -= entry.bytes;
  }

  clear(): void {
    this.#entries.clear();
    this.#bytes = 0;
  }
}

/**
 * A rough size in bytes of a row as the heap holds it: its JSON's length (V8 keeps ASCII strings at a
 * byte a character) plus a fixed allowance for the objects around it. Called once per cached row, not
 * per read, so a large row's serialisation is paid once.
 */
export function estimatedBytes(value: unknown): number {
  return (JSON.stringify(value)?.length ?? 0) + rowOverheadBytes;
}

/** What a small row takes beyond its JSON (object headers, the map's entry, hidden classes), roughly. */
const rowOverheadBytes = 512;
