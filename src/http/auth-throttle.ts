/**
 * Throttles wrong API keys per client address: after `maxFailures` wrong keys from one address within
 * `windowMs`, further wrong keys from it get 429 `auth_throttled` (and `Retry-After`) instead of 401
 * until that window ends.
 *
 * It throttles the guesses, never a valid key: keys are checked as always while an address is throttled,
 * and a valid one passes. Keys are about 190 random bits, so no rate of guessing finds one; what wrong
 * keys cost is a lookup each and noise, and behind a reverse proxy or a NAT many clients share one
 * address, so one hostile or misconfigured client must not lock the others out. The 429 tells a client
 * stuck on a bad key to back off, and while the address is throttled the same wrong key sent again is
 * refused from memory, without a lookup (a script retrying a revoked key is the usual case).
 *
 * Memory is bounded: at most `maxAddresses` addresses are remembered (the least recently seen is forgotten
 * first) and at most `badKeysPerAddress` wrong keys each.
 */

/** How the throttle is tuned; `maxFailures: 0` turns it off. */
export interface AuthThrottleOptions {
  maxFailures: number;
  windowMs: number;
  now?: () => number;
  maxAddresses?: number;
  badKeysPerAddress?: number;
}

interface AddressState {
  failures: number;
  /** When the current window of failures started. */
  windowStart: number;
  /** Hashes of wrong keys sent while throttled, most recent last. */
  badKeys: string[];
}

export class AuthThrottle {
  readonly #o: Required<AuthThrottleOptions>;
  /** Insertion order is recency order: every touch moves an address to the end. */
  readonly #addresses = new Map<string, AddressState>();

  constructor(options: AuthThrottleOptions) {
    this.#o = { now: Date.now, maxAddresses: 10_000, badKeysPerAddress: 8, ...options };
  }

  get enabled(): boolean {
    return this.#o.maxFailures > 0;
  }

  /** Addresses remembered now (for tests and the soak script). */
  get size(): number {
    return this.#addresses.size;
  }

  /**
   * Milliseconds `address` stays throttled when `keyHash` is a wrong key it already sent while
   * throttled (refuse it without a lookup); 0 otherwise (look the key up).
   */
  knownBadMs(address: string, keyHash: string): number {
    const state = this.#addresses.get(address);
    if (!state?.badKeys.includes(keyHash)) return 0;
    return this.#throttledMs(state);
  }

  /**
   * A wrong key came from `address`. Returns how many milliseconds the address stays throttled (answer
   * 429 with that wait), or 0 while it is within its allowance (answer 401).
   */
  failed(address: string, keyHash: string): number {
    if (!this.enabled) return 0;
    const state = this.#touch(address);
    const now = this.#o.now();
    if (state.failures === 0 || now - state.windowStart >= this.#o.windowMs) {
      state.failures = 0;
      state.windowStart = now;
      state.badKeys = [];
    }
    state.failures++;
    const wait = this.#throttledMs(state);
    if (wait > 0 && !state.badKeys.includes(keyHash)) {
      state.badKeys.push(keyHash);
      if (state.badKeys.length > this.#o.badKeysPerAddress) state.badKeys.shift();
    }
    return wait;
  }

  #throttledMs(state: AddressState): number {
    if (state.failures <= this.#o.maxFailures) return 0;
    return Math.max(0, state.windowStart + this.#o.windowMs - this.#o.now());
  }

  #touch(address: string): AddressState {
    let state = this.#addresses.get(address);
    if (state) this.#addresses.delete(address);
    else {
      state = { failures: 0, windowStart: 0, badKeys: [] };
      if (this.#addresses.size >= this.#o.maxAddresses) {
        const oldest = this.#addresses.keys().next().value;
        if (oldest !== undefined) this.#addresses.delete(oldest);
      }
    }
    this.#addresses.set(address, state);
    return state;
  }
}
