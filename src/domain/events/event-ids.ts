/**
 * Event IDs `<epoch_ms>-<sequence>`, strictly increasing per emitter: within one millisecond the
 * sequence counts up, and after a clock step back the last millisecond is reused with a higher sequence.
 */
import type { StorageOps } from "../../storage/port.ts";

export interface EventIdParts {
  ms: number;
  seq: number;
}

export function formatEventId(p: EventIdParts): string {
  return `${p.ms}-${p.seq}`;
}

export function parseEventId(id: string): EventIdParts | undefined {
  const m = /^(\d{1,15})-(\d{1,9})$/.exec(id);
  return m ? { ms: Number(m[1]), seq: Number(m[2]) } : undefined;
}

export class EventIdGenerator {
  readonly #last = new Map<string, EventIdParts>();
  /**
   * With several nodes on one store: the emitters whose clock this node alone advances now (it holds
   * their source's run lease), which it may keep in memory. Every other emitter's clock is read in the
   * transaction and locked until it ends, so that two nodes never hand out the same ID.
   */
  #mayKeep: ((emitterId: string) => boolean) | undefined;

  /** Keeps clocks in memory only for emitters `mayKeep` accepts (several nodes share the store). */
  shareStore(mayKeep: (emitterId: string) => boolean): void {
    this.#mayKeep = mayKeep;
  }

  /** Next ID for `emitterId` at `nowMs`; persists the emitter's clock in the same transaction. */
  async next(tx: StorageOps, emitterId: string, nowMs: number): Promise<EventIdParts> {
    const keep = this.#mayKeep?.(emitterId) ?? true;
    let last = keep ? this.#last.get(emitterId) : undefined;
    if (!last)
      last = (await tx.getEmitterClock(emitterId, this.#mayKeep !== undefined)) ?? { ms: 0, seq: -1 };
    const id = nowMs > last.ms ? { ms: nowMs, seq: 0 } : { ms: last.ms, seq: last.seq + 1 };
    if (keep) this.#last.set(emitterId, id);
    else this.#last.delete(emitterId);
    await tx.putEmitterClock(emitterId, id.ms, id.seq);
    return id;
  }

  /** Drops the cached clock (the emitter was deleted, or a transaction using it rolled back). */
  forget(emitterId: string): void {
    this.#last.delete(emitterId);
  }
}
