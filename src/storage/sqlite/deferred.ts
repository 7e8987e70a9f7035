/**
 * Writes held back inside a transaction. Every stored event or invocation writes the same few rows
 * (the emitter's clock, the owner's usage of the day); inside a transaction those writes are held here
 * and made once per row just before COMMIT, so a group commit of many emits writes each of those rows
 * once. Any read or delete of those tables makes them first (`settle`), so nothing inside the
 * transaction sees the difference. PostgreSQL holds back more, to save round trips
 * (postgres/deferred.ts); here a write is a function call, and only the repeated rows are worth it.
 */
import type { Usage } from "../../domain/types.ts";

/** How the held writes are made: the statements of events.ts and accounts.ts. */
export interface HeldWriters {
  putClock(emitterId: string, ms: number, seq: number): void;
  addUsage(userId: string, day: string, delta: Usage): void;
}

/** Writes held back to the end of a transaction, one per row. */
interface Held {
  clocks: Map<string, { ms: number; seq: number }>;
  usage: Map<string, Usage & { userId: string; day: string }>;
}

/** The transaction's held-back clock and usage writes (one per connection). */
export class DeferredWrites {
  readonly #writers: HeldWriters;
  #held: Held | undefined;

  constructor(writers: HeldWriters) {
    this.#writers = writers;
  }

  /** Starts holding back clock and usage writes until `end` (a transaction began). */
  start(): void {
    this.#held = { clocks: new Map(), usage: new Map() };
  }

  /** Stops holding writes back: makes them (before COMMIT) or, with `discard`, drops them (ROLLBACK). */
  end(discard = false): void {
    const held = this.#held;
    this.#held = undefined;
    if (held && !discard) this.#write(held);
  }

  /** Makes the held-back writes now and keeps deferring (a read or delete inside the transaction needs them). */
  settle(): void {
    const held = this.#held;
    if (!held) return;
    this.#held = undefined;
    this.#write(held);
    this.start();
  }

  /** Writes an emitter's clock, or holds its last value back inside a transaction. */
  putClock(emitterId: string, ms: number, seq: number): void {
    const held = this.#held?.clocks;
    if (held) held.set(emitterId, { ms, seq });
    else this.#writers.putClock(emitterId, ms, seq);
  }

  /** Adds to a user's usage of a day, or sums the additions inside a transaction. */
  addUsage(userId: string, day: string, d: Usage): void {
    const held = this.#held?.usage;
    if (!held) {
      this.#writers.addUsage(userId, day, d);
      return;
    }
    const key = `${userId}\0${day}`;
    const sum = held.get(key);
    if (sum) {
      sum.invocations += d.invocations;
      sum.computeMs += d.computeMs;
      sum.storedBytes += d.storedBytes;
    } else held.set(key, { userId, day, ...d });
  }

  #write(held: Held): void {
    for (const [emitterId, c] of held.clocks) this.#writers.putClock(emitterId, c.ms, c.seq);
    for (const u of held.usage.values()) this.#writers.addUsage(u.userId, u.day, u);
  }
}
