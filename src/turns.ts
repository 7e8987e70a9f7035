/**
 * Turns: a counting semaphore whose waits end. At most `size` holders at once; the others wait first
 * come first served until a turn frees, their own wait runs out, or their signal aborts (the client
 * left, the server closes). The installer's processes, each account's searches and each user's SSE
 * replays are bounded by it.
 */

/** Gives a turn back (once, however often called): it passes to the first waiter, or is freed. */
export type Release = () => void;

export class Turns {
  readonly #size: () => number;
  readonly #onIdle: (() => void) | undefined;
  #held = 0;
  readonly #waiting: Array<() => void> = [];

  /**
   * `size`: turns at once, read at each take (a setting tests change); `onIdle`: called whenever no turn
   * is held and none is waited for, so that a map of turns per key can drop this one.
   */
  constructor(size: number | (() => number), onIdle?: () => void) {
    this.#size = typeof size === "number" ? () => size : size;
    this.#onIdle = onIdle;
  }

  /** No turn is held and none is waited for. */
  get idle(): boolean {
    return this.#held === 0 && this.#waiting.length === 0;
  }

  /**
   * A turn, or undefined when `waitMs` passed or `signal` aborted before one freed (the signal's reason
   * tells which of its causes it was). A free turn is taken at once, even with `waitMs` 0; with `waitMs`
   * infinite the wait ends only with a turn or the signal.
   */
  async take(waitMs: number, signal?: AbortSignal): Promise<Release | undefined> {
    if (signal?.aborted) return undefined;
    if (this.#held < Math.max(1, this.#size())) {
      this.#held++;
      return this.#release();
    }
    const granted = await new Promise<boolean>((resolve) => {
      const settle = (turn: boolean) => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", give);
        resolve(turn);
      };
      const grant = () => settle(true);
      const give = () => {
        this.#waiting.splice(this.#waiting.indexOf(grant), 1);
        settle(false);
        if (this.idle) this.#onIdle?.();
      };
      // setTimeout would take an infinite delay for 1 ms.
      const timer = Number.isFinite(waitMs) ? setTimeout(give, Math.max(0, waitMs)) : undefined;
      signal?.addEventListener("abort", give, { once: true });
      this.#waiting.push(grant);
    });
    return granted ? this.#release() : undefined;
  }

  #release(): Release {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.#waiting.shift();
      if (next) return next();
      this.#held--;
      if (this.idle) this.#onIdle?.();
    };
  }
}

/**
 * Turns per key (an account's searches, an owner's component saves): each key's `Turns` of `size` is
 * made at its first take and dropped once nothing of it is held or waited for, so that no key stays.
 */
export class TurnsByKey {
  readonly #size: number | (() => number);
  readonly #byKey = new Map<string, Turns>();

  constructor(size: number | (() => number)) {
    this.#size = size;
  }

  /** One of `key`'s turns, as `Turns.take`. */
  take(key: string, waitMs: number, signal?: AbortSignal): Promise<Release | undefined> {
    let turns = this.#byKey.get(key);
    if (!turns) {
      const made = new Turns(this.#size, () => {
        if (this.#byKey.get(key) === made) this.#byKey.delete(key);
      });
      this.#byKey.set(key, made);
      turns = made;
    }
    return turns.take(waitMs, signal);
  }
}
