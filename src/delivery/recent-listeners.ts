/**
 * What the claims remember of each listener (its destination key, its owner), kept for the listeners
 * seen last only: a node that sent to a million webhooks over its life otherwise kept every one, and
 * walked them all at each claim. Each delivery claimed or held sees its listener again, so the listeners
 * in flight stay in. One forgotten is learnt again from its next delivery; until then a claim may take
 * more of it than its room, which the claim gives back or which waits for a slot (claims.ts).
 */

/**
 * Listeners remembered: eight times what a node holds at most by default (`maxHeld`, 512, each held
 * delivery naming at most one listener), so that those in flight and those a claim just left out fit
 * many times over, and a claim's walk over them stays well under a millisecond.
 */
export const rememberedListeners = 4096;

/** A map by listener ID that forgets the least recently set past `max` entries. */
export class RecentListeners<V> {
  readonly #max: number;
  /** Least recently set first. */
  readonly #entries = new Map<string, V>();

  constructor(max = rememberedListeners) {
    this.#max = max;
  }

  get size(): number {
    return this.#entries.size;
  }

  get(listenerId: string): V | undefined {
    return this.#entries.get(listenerId);
  }

  /** Remembers `value` for `listenerId` as the most recent; past `max`, forgets the least recent. */
  set(listenerId: string, value: V): void {
    this.#entries.delete(listenerId);
    this.#entries.set(listenerId, value);
    if (this.#entries.size > this.#max) this.#entries.delete(this.#entries.keys().next().value!);
  }

  keys(): Iterable<string> {
    return this.#entries.keys();
  }
}
