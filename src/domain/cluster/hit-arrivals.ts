/**
 * Where the hits of the sources this node runs come in: straight from callers, or sent on by which other
 * node (hit-forwarding.ts). The placement (placement.ts) reads it to give a source's lease to the node
 * its hits arrive at, so that a load balancer that routes each source's endpoint to one node (by path or
 * host) costs no forwarding hop: about half of a forwarded hit's CPU on three nodes (docs/architecture.md,
 * "Leases that follow their hits").
 *
 * Counts decay by half at each heartbeat, so they weigh the last few seconds: a source whose callers move
 * to another node follows them within seconds, and one that gets no hits any more ends with no lead.
 */

/** The key of hits that came to this node from callers, not from another node. */
export const direct = "";

/** Where most of a source's recent hits came in. */
export interface Lead {
  /** The node they came through, or `direct`: to this node from callers. */
  via: string;
  /** Its part of the source's recent hits, 0 to 1. */
  share: number;
  /** The source's recent hits, decayed (a steady r hits a second gives about 2r). */
  total: number;
}

/** At most this many sources are counted (the busiest stay: a new source enters once one leaves). */
const maxSources = 100_000;
/** A decayed count below this is dropped. */
const negligible = 0.5;

export class HitArrivals {
  /** By source: decayed counts by the node they came through (`direct` for callers). */
  readonly #counts = new Map<string, Map<string, number>>();

  /** A hit of `sourceId` runs here; `from` is the node that sent it on, undefined when a caller sent it here. */
  count(sourceId: string, from: string | undefined): void {
    let bySource = this.#counts.get(sourceId);
    if (!bySource) {
      if (this.#counts.size >= maxSources) return;
      bySource = new Map();
      this.#counts.set(sourceId, bySource);
    }
    const key = from ?? direct;
    bySource.set(key, (bySource.get(key) ?? 0) + 1);
  }

  /** Once a heartbeat: every count halves, and those that are next to nothing go. */
  decay(): void {
    for (const [sourceId, bySource] of this.#counts) {
      for (const [via, n] of bySource) {
        if (n / 2 < negligible) bySource.delete(via);
        else bySource.set(via, n / 2);
      }
      if (bySource.size === 0) this.#counts.delete(sourceId);
    }
  }

  /** Where most of the source's recent hits came in; undefined when none came. */
  lead(sourceId: string): Lead | undefined {
    const bySource = this.#counts.get(sourceId);
    if (!bySource) return undefined;
    let total = 0;
    let via = direct;
    let most = -1;
    for (const [node, n] of bySource) {
      total += n;
      if (n > most) {
        most = n;
        via = node;
      }
    }
    return total > 0 ? { via, share: most / total, total } : undefined;
  }

  /** The source left this node (given away, or deleted): its counts start again if it comes back. */
  forget(sourceId: string): void {
    this.#counts.delete(sourceId);
  }
}
