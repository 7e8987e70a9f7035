/**
 * The deadlines of the attempts in flight, kept by one timer for all of them instead of a `setTimeout`
 * per attempt. A timer per attempt cost its Timeout object, its insertion in Node's timer list and its
 * removal, and whenever every attempt of a batch had ended, the list's removal from Node's timer heap
 * and its insertion again with the next attempt (issue 29). Here an attempt costs a Map entry; the one
 * timer is moved only when an attempt is due before it, and when it fires it ends the attempts past due
 * and is set for the earliest of the others; it is cleared when no attempt is left (then set again by
 * the next one: once per batch of attempts rather than once per attempt).
 */
export class AttemptDeadlines<K> {
  readonly #expired: (key: K) => void;
  /** Attempts by their deadline (`performance.now()` milliseconds). */
  readonly #due = new Map<K, number>();
  #timer: NodeJS.Timeout | undefined;
  /** When the timer fires (`performance.now()` milliseconds); Infinity when none is set. */
  #timerAt = Number.POSITIVE_INFINITY;

  /** `expired` is called once for each attempt still kept when its deadline passes. */
  constructor(expired: (key: K) => void) {
    this.#expired = expired;
  }

  /** Keeps `key` until `forget`, and calls `expired` with it if that has not come within `ms`. */
  add(key: K, ms: number): void {
    const at = performance.now() + ms;
    this.#due.set(key, at);
    if (at < this.#timerAt) this.#arm(at);
  }

  /** The attempt ended: it no longer expires. */
  forget(key: K): void {
    // With none left the timer goes too, as the attempts' own timers did: nothing is kept up for them.
    if (this.#due.delete(key) && this.#due.size === 0 && this.#timer) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
      this.#timerAt = Number.POSITIVE_INFINITY;
    }
  }

  /** Attempts kept (tests). */
  get size(): number {
    return this.#due.size;
  }

  #arm(at: number): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timerAt = at;
    this.#timer = setTimeout(() => this.#fire(), Math.max(0, Math.ceil(at - performance.now())));
  }

  #fire(): void {
    this.#timer = undefined;
    this.#timerAt = Number.POSITIVE_INFINITY;
    const now = performance.now();
    let next = Number.POSITIVE_INFINITY;
    const expired: Array<[K, number]> = [];
    for (const [key, at] of this.#due) {
      if (at <= now) expired.push([key, at]);
      else if (at < next) next = at;
    }
    // In the order of their deadlines, also when a late timer finds several past due (a loaded machine).
    expired.sort((a, b) => a[1] - b[1]);
    for (const [key] of expired) {
      this.#due.delete(key);
      this.#expired(key);
    }
    // An `expired` callback may have added attempts and set the timer already.
    if (next < this.#timerAt) this.#arm(next);
  }
}
