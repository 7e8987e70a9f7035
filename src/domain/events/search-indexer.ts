/**
 * Puts events into the event search's indexes a moment after their commit, on a store whose commits
 * leave them out (`indexEventsForSearch`: PostgreSQL, migration 016). Indexing in the commit was most of
 * PostgreSQL's CPU per stored event, and a busy window of 100 drops most of its events within a second;
 * the events still stored `delayMs` after their commit are indexed here, in batches, the others never.
 * The search finds every stored event either way, so this only moves work, never a result. Every node
 * runs one; two passing at once skip each other's rows.
 */
import type { Clock } from "../../clock.ts";
import type { StorageOps } from "../../storage/port.ts";

interface SearchIndexerDeps {
  /** The store's `indexEventsForSearch`. */
  index: NonNullable<StorageOps["indexEventsForSearch"]>;
  clock: Clock;
  /** Called with what a pass could not do (the store was away, say); the next pass tries again. */
  onError: (err: unknown) => void;
  /** `delayMs` below, for tests. */
  delayMs?: number;
}

/**
 * How long after its commit an event is indexed, and how often a pass runs: a window of 100 at 100
 * events a second or more has dropped each event by then. Longer would save more at lower rates, and
 * leave more rows for the search to read without an index (a window's newest, at most).
 */
const delayMs = 1_000;
/** Rows a statement indexes: each is a short transaction beside the commits, whose trim may wait for it. */
const batch = 200;

export class SearchIndexer {
  readonly #d: SearchIndexerDeps;
  /** The pass under way, if any. */
  #running: Promise<void> | undefined;
  /** The wait for the next pass; undefined while stopped. */
  #timer: NodeJS.Timeout | undefined;
  /** A stop was asked for: a pass under way ends after its batch. */
  #stopped = false;

  constructor(deps: SearchIndexerDeps) {
    this.#d = deps;
  }

  start(): void {
    if (this.#timer) return;
    this.#stopped = false;
    this.#schedule();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#running;
  }

  /** Indexes what was stored `delayMs` ago or earlier; returns how many. */
  async pass(): Promise<number> {
    const before = this.#d.clock.now() - (this.#d.delayMs ?? delayMs);
    let indexed = 0;
    for (;;) {
      const n = await this.#d.index(before, batch);
      indexed += n;
      if (n < batch || this.#stopped) return indexed;
      // Other work first between batches, as the pruner does.
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  }

  /**
   * The next pass in `delayMs`, scheduled as the pruner schedules its own; a failed pass is reported and
   * the next tries again.
   */
  #schedule(): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => {
      this.#running = this.pass()
        .then(
          () => undefined,
          (err: unknown) => this.#d.onError(err),
        )
        .finally(() => this.#schedule());
    }, this.#d.delayMs ?? delayMs);
    // The wait keeps no process alive.
    this.#timer.unref();
  }
}
