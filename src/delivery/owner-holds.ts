/**
 * Deliveries each owner has claimed on this node and not finished, so that the claims leave an owner at
 * `maxHeldPerOwner` out: one owner's backlog to slow destinations no longer takes every held place
 * (`maxHeld`) while other owners' deliveries wait in the store. Listeners' owners are remembered for the
 * recent ones only (recent-listeners.ts).
 */
import type { Delivery } from "../domain/types.ts";
import { RecentListeners, rememberedListeners } from "./recent-listeners.ts";
import { adjust } from "./tally.ts";

export class OwnerHolds {
  /** Owner of each delivery held, by delivery ID. */
  readonly #ownerOf = new Map<string, string>();
  readonly #held = new Map<string, number>();
  /** Owner of each listener seen lately, to leave an owner's listeners out of a claim. */
  readonly #listenerOwner: RecentListeners<string>;

  /** `maxListeners`: listeners whose owner is remembered (recent-listeners.ts). */
  constructor(maxListeners = rememberedListeners) {
    this.#listenerOwner = new RecentListeners(maxListeners);
  }

  /** Remembers whose listener `d`'s is, without holding it (a delivery given back at once). */
  see(d: Delivery): void {
    this.#listenerOwner.set(d.listenerId, d.ownerId);
  }

  /** `d` is held from now until `finished`. */
  add(d: Delivery): void {
    this.see(d);
    if (this.#ownerOf.has(d.id)) return;
    this.#ownerOf.set(d.id, d.ownerId);
    adjust(this.#held, d.ownerId, 1);
  }

  /** Delivery `id` is no longer held (ended, or never to be started here); unknown IDs are ignored. */
  finished(id: string): void {
    const owner = this.#ownerOf.get(id);
    if (owner === undefined) return;
    this.#ownerOf.delete(id);
    adjust(this.#held, owner, -1);
  }

  /** Deliveries of `owner` held now. */
  held(owner: string): number {
    return this.#held.get(owner) ?? 0;
  }

  /** The owner of `listenerId`, once one of its deliveries was seen. */
  ownerOfListener(listenerId: string): string | undefined {
    return this.#listenerOwner.get(listenerId);
  }

  /** Every listener whose owner is remembered. */
  listeners(): Iterable<string> {
    return this.#listenerOwner.keys();
  }
}
