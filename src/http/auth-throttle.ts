/**
 * Throttles guessing of API keys, per client address, the way fail2ban does: after `maxFailures` wrong
 * keys from one address within `windowMs`, further requests from it with a key are refused with 429
 * `auth_throttled` (and `Retry-After`) until that window ends, without the key being looked up, so a guess
 * made while throttled learns nothing.
 *
 * Keys that already worked from that address keep working while it is throttled: behind a reverse proxy
 * or a NAT many clients share one address, and one misconfigured or hostile client must not lock the
 * others out (GitHub instead blocks every attempt, valid ones too). A new key, even a correct one, waits
 * for the window like any guess.
 *
 * Memory is bounded: at most `maxAddresses` addresses are remembered (the least recently seen is forgotten
 * first) and at most `goodKeysPerAddress` keys each.
 */

/** How the throttle is tuned; `maxFailures: 0` turns it off. */
export interface AuthThrottleOptions {
  maxFailures: number;
  windowMs: number;
  now?: () => number;
  maxAddresses?: number;
  goodKeysPerAddress?: number;
}

interface AddressState {
  failures: number;
  /** When the current window of failures started. */
  windowStart: number;
  /** Hashes of keys that authenticated from this address, most recent last. */
  goodKeys: string[];
}

export class AuthThrottle {
  readonly #o: Required<AuthThrottleOptions>;
  /** Insertion order is recency order: every touch moves an address to the end. */
  readonly #addresses = new Map<string, AddressState>();

  constructor(options: AuthThrottleOptions) {
    this.#o = { now: Date.now, maxAddresses: 10_000, goodKeysPerAddress: 4, ...options };
  }

  get enabled(): boolean {
    return this.#o.maxFailures > 0;
  }

  /** Addresses remembered now (for tests and the soak script). */
  get size(): number {
    return this.#addresses.size;
  }

  /** Milliseconds `address` must wait before `keyHash` is looked up; 0 when it may be now. */
  waitMs(address: string, keyHash: string): number {
    if (!this.enabled) return 0;
    const state = this.#addresses.get(address);
    if (!state || state.failures < this.#o.maxFailures) return 0;
    const left = state.windowStart + this.#o.windowMs - this.#o.now();
    if (left <= 0) {
      state.failures = 0;
      return 0;
    }
    return state.goodKeys.includes(keyHash) ? 0 : left;
  }

  /** A wrong key came from `address`. */
  failed(address: string): void {
    if (!this.enabled) return;
    const state = this.#touch(address);
    const now = this.#o.now();
    if (state.failures === 0 || now - state.windowStart >= this.#o.windowMs) {
      state.failures = 0;
      state.windowStart = now;
    }
    state.failures++;
  }

  /** `keyHash` authenticated from `address`. */
  succeeded(address: string, keyHash: string): void {
    if (!this.enabled) return;
    const known = this.#addresses.get(address);
    // The usual case, the same client again: nothing to change, no reordering.
    if (known && known.goodKeys[known.goodKeys.length - 1] === keyHash) return;
    const state = this.#touch(address);
    const at = state.goodKeys.indexOf(keyHash);
    if (at !== -1) state.goodKeys.splice(at, 1);
    state.goodKeys.push(keyHash);
    if (state.goodKeys.length > this.#o.goodKeysPerAddress) state.goodKeys.shift();
  }

  #touch(address: string): AddressState {
    let state = this.#addresses.get(address);
    if (state) this.#addresses.delete(address);
    else {
      state = { failures: 0, windowStart: 0, goodKeys: [] };
      if (this.#addresses.size >= this.#o.maxAddresses) {
        const oldest = this.#addresses.keys().next().value;
        if (oldest !== undefined) this.#addresses.delete(oldest);
      }
    }
    this.#addresses.set(address, state);
    return state;
  }
}
