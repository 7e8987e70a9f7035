/**
 * Deletes the events each channel's retention no longer keeps (retention.ts), in the background and in
 * small batches, so that ingest never waits behind a long delete: every batch is one short statement
 * (on SQLite, the file's one writer, a turn of the store's lock), and the pruner yields to whatever is
 * queued between batches. It visits the windows that got events since its last visit every
 * `pruneIntervalMs`, and every window every `sweepIntervalMs` (ages move on without new events, and a
 * policy may have shrunk), and the windows of a source or workflow deleted on this node at its next
 * pass: a deleted one's events are all its to delete. Listing never waits for it: it shows only the window
 * (events.ts of each driver).
 */
import { BoundedCache } from "../../bounded-cache.ts";
import type { Clock } from "../../clock.ts";
import { pauseAfterBatch } from "../../pace.ts";
import type { EventIdKey, EventWindowKey, StorageOps } from "../../storage/port.ts";
import type { Bus } from "../bus.ts";
import type { PrunedBy, Retention } from "./retention.ts";

const dayMs = 86_400_000;

interface PrunerDeps {
  store: StorageOps;
  retention: Retention;
  bus: Bus;
  clock: Clock;
  /** Called with what a pass could not do (the store was away, say); the next pass tries again. */
  onError: (err: unknown) => void;
}

/**
 * Batches one visit deletes from a window by count at most; a window with more to go is visited again at
 * the next pass, so that pruning a million events of one never leaves the others waiting behind it.
 */
const batchesPerVisit = 100;

/**
 * One window's batches, oldest first, each after the pause the one before asks for, each starting past
 * the newest event the one before deleted: the pruner's visits and `deleteRange` alike.
 *
 * The pause before a window's next batch (`pauseAfterBatch`): as long as the last batch took, so that a
 * long prune takes at most about half of the server's time and store (on SQLite, half of the lock's
 * turns), and hits queued behind a batch do not find another one after it (pruning 1,000,000 events of
 * one window on SQLite took 8.4 s back to back, with ingest p50 at 16 ms meanwhile); and at least as
 * long as keeps the pruner within `pruneRate` events a second. At half of a fast machine's time it
 * deleted 250,000 to 500,000 a second on SQLite, writing the WAL faster than the store's worker copies
 * it back (about 10,000 pages in its 200 ms), so that the server's own commits ran the backstop
 * checkpoint, 20 to 60 ms on the event loop each (docs/architecture.md, "Event windows for retention").
 */
class PacedBatches {
  /** The newest event deleted so far (or where to start): the next batch seeks past it. */
  after: EventIdKey | undefined;
  /** Batches run, and events they deleted. */
  count = 0;
  deleted = 0;
  readonly #store: StorageOps;
  readonly #key: EventWindowKey;
  readonly #pruneRate: number;
  #lastMs = 0;
  #lastDeleted = 0;

  constructor(store: StorageOps, key: EventWindowKey, pruneRate: number, after: EventIdKey | undefined) {
    this.#store = store;
    this.#key = key;
    this.#pruneRate = pruneRate;
    this.after = after;
  }

  /** Deletes up to `limit` more within `bounds`; resolves with how many. */
  async next(
    limit: number,
    bounds: { olderThanMs?: number | undefined; upTo?: EventIdKey | undefined } = {},
  ): Promise<number> {
    if (this.count++ > 0) await pauseAfterBatch(this.#lastMs, this.#lastDeleted, this.#pruneRate);
    const started = performance.now();
    const { emitterId, channel } = this.#key;
    const r = await this.#store.pruneEvents(emitterId, channel, limit, { ...bounds, after: this.after });
    this.#lastMs = performance.now() - started;
    this.#lastDeleted = r.deleted;
    if (r.last) this.after = r.last;
    this.deleted += r.deleted;
    return r.deleted;
  }
}

/** Windows whose size the pruner remembers between sweeps (a forgotten one is counted again). */
const sizesKept = 100_000;

/**
 * A window's size as the pruner knows it: `n` at most what it holds, and `arrived`, the events this node
 * stored in it since the entry was made (what a visit adds for those stored after its count).
 */
interface WindowSize {
  n: number;
  arrived: number;
  last?: EventIdKey | undefined;
}

export class EventPruner {
  readonly #d: PrunerDeps;
  readonly #touched = new Map<string, EventWindowKey>();
  /**
   * Each window's size as last counted plus the events this node stored since: a touched window known to
   * be within its count is not counted again until the next sweep (a count of a window of a million
   * rows, each second, was a cost PostgreSQL paid beside ingest). Events other nodes store are counted
   * by their own pruners, and by every sweep.
   */
  readonly #sizes = new BoundedCache<string, WindowSize>(sizesKept);
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #lastSweepMs = Number.NEGATIVE_INFINITY;
  #stopped = true;
  /** The last pass left a window with more to delete. */
  #behind = false;
  /** Sources and workflows deleted on this node since the last pass: their windows are emptied next. */
  readonly #deleted = new Set<string>();

  constructor(deps: PrunerDeps) {
    this.#d = deps;
    deps.bus.on("event.stored", (e) => {
      if (this.#stopped) return;
      const key = `${e.emitterId}\0${e.channel}`;
      this.#touched.set(key, e);
      const size = this.#sizes.get(key);
      if (size) {
        size.n++;
        size.arrived++;
      }
    });
    // Sources deleted through other nodes are found by this node's sweeps (or by theirs).
    deps.bus.on("source.deleted", ({ sourceId, remote }) => {
      if (!remote) this.emptySoon(sourceId);
    });
  }

  /** The next pass empties the windows of a deleted source or workflow (`Retention.prunedBy`). */
  emptySoon(emitterId: string): void {
    if (!this.#stopped) this.#deleted.add(emitterId);
  }

  start(): void {
    if (!this.#stopped) return;
    this.#stopped = false;
    this.#schedule(0);
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#running;
  }

  /**
   * Deletes an inclusive ID range (open ends when undefined) of one channel, or of every channel, in the
   * pruner's batches and at its pace (the API's `DELETE /v1/sources/{id}/events`); resolves with how many
   * it deleted. One statement deleting a range of 1,000,000 held SQLite's one writer, and every other
   * source's ingest, for seconds.
   */
  async deleteRange(
    emitterId: string,
    range: { from?: EventIdKey | undefined; to?: EventIdKey | undefined; channel?: string | undefined },
  ): Promise<number> {
    const { store, retention } = this.#d;
    const { pruneBatch, pruneRate } = retention.settings;
    const channels = range.channel === undefined ? await store.listChannels(emitterId) : [range.channel];
    let deleted = 0;
    for (const channel of channels) {
      // Inclusive: `after` is exclusive, and sequence numbers start at 0.
      const from = range.from && { ms: range.from.ms, seq: range.from.seq - 1 };
      const batches = new PacedBatches(store, { emitterId, channel }, pruneRate, from);
      while ((await batches.next(pruneBatch, { upTo: range.to })) === pruneBatch);
      deleted += batches.deleted;
    }
    return deleted;
  }

  /** The next pass visits every window (a source's policy changed). */
  sweepSoon(): void {
    this.#lastSweepMs = Number.NEGATIVE_INFINITY;
  }

  /** One pass now: the touched windows, or every window when a sweep is due or `everything`. */
  async pass(everything = false): Promise<number> {
    const sweep =
      everything || this.#d.clock.now() - this.#lastSweepMs >= this.#d.retention.settings.sweepIntervalMs;
    const policies = new Map<string, Promise<PrunedBy>>();
    let deleted = 0;
    this.#behind = false;
    if (sweep) {
      this.#lastSweepMs = this.#d.clock.now();
      this.#touched.clear();
      this.#deleted.clear(); // every window is visited
      let key = await this.#d.store.nextEventWindow();
      while (key && !(this.#stopped && !everything)) {
        deleted += await this.#prune(key, policies, true);
        key = await this.#d.store.nextEventWindow(key);
      }
    } else {
      for (const emitterId of [...this.#deleted]) {
        for (const channel of await this.#d.store.listChannels(emitterId))
          this.#touched.set(`${emitterId}\0${channel}`, { emitterId, channel });
        this.#deleted.delete(emitterId);
      }
      const touched = [...this.#touched.values()];
      this.#touched.clear();
      for (const key of touched) deleted += await this.#prune(key, policies, false);
    }
    return deleted;
  }

  #schedule(delayMs: number): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => {
      this.#running = this.pass()
        .then(
          () => undefined,
          (err) => this.#d.onError(err),
        )
        // A window with more to go is taken up again at once, after the others had their turn.
        .finally(() => this.#schedule(this.#behind ? 0 : this.#d.retention.settings.pruneIntervalMs));
    }, delayMs);
    this.#timer.unref();
  }

  /** Deletes what one window no longer keeps: what is past its age, then its oldest beyond its count. */
  async #prune(
    key: EventWindowKey,
    policies: Map<string, Promise<PrunedBy>>,
    sweeping: boolean,
  ): Promise<number> {
    const { store, retention } = this.#d;
    const { emitterId, channel } = key;
    const sizeKey = `${emitterId}\0${channel}`;
    let policy = policies.get(emitterId);
    if (!policy) {
      policy = retention.prunedBy(store, emitterId);
      policies.set(emitterId, policy);
    }
    const prunedBy = await policy;
    // A deleted source's or workflow's events are all deleted here, in paced batches.
    const { events, days } =
      prunedBy === "deleted" ? { events: 0, days: undefined } : retention.limits(prunedBy, channel);
    const batch = retention.settings.pruneBatch;
    // What this pruner deleted last from the window: everything up to it is gone (events are only ever
    // added after it), so each batch seeks past it instead of walking what PostgreSQL keeps until vacuum.
    const known = this.#sizes.get(sizeKey);
    // The entry events stored meanwhile count in: replacing it after the count lost those stored between
    // the count and the visit's end, and a window so undercounted was left over its limit until the
    // next sweep.
    const size = known ?? { n: Number.POSITIVE_INFINITY, arrived: 0 };
    if (!known) this.#sizes.set(sizeKey, size);
    const batches = new PacedBatches(store, key, retention.settings.pruneRate, size.last);
    const more = () => {
      // More to go: the next pass goes on, after the other windows' turn.
      this.#touched.set(sizeKey, key);
      this.#behind = true;
      size.last = batches.after;
      return batches.deleted;
    };
    if (days !== undefined) {
      const olderThanMs = this.#d.clock.now() - days * dayMs;
      while ((await batches.next(batch, { olderThanMs })) === batch)
        if (batches.count >= batchesPerVisit) return more();
    }
    if (!sweeping && batches.deleted === 0 && size.n <= events) return 0;
    // Deleted up to the window's cut, not a number counted at the start: others delete from the window
    // too (a range the API deletes, PostgreSQL's trim of a small window as it stores, another node's
    // pruner), and a count taken before their deletes took as many of the kept events after them. The
    // events this node stores from here on are added to the size the visit leaves (some twice: an
    // overcount costs a look at the next visit, an undercount a window over its limit).
    const arrivedBefore = size.arrived;
    const cut = await store.eventWindowCut(emitterId, channel, events);
    if (cut) {
      if (batches.count >= batchesPerVisit) return more();
      while ((await batches.next(batch, { upTo: cut })) === batch)
        if (batches.count >= batchesPerVisit) return more();
    }
    size.n = events + (size.arrived - arrivedBefore);
    size.last = batches.after;
    return batches.deleted;
  }
}
