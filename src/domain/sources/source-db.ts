/**
 * Each source's `this.db` as the runner holds it: the db its last finished invocation left (the store
 * has it too once committed), read from the store on first use, and a run's writes applied to it at
 * once so the next invocation sees them. Versions only grow, so an executor's cached copy is replaced
 * whenever ours differs from what it built on.
 */
import { BoundedCache } from "../../bounded-cache.ts";
import type { Config } from "../../config.ts";
import type { InvokeResult } from "../../runtime/types.ts";
import type { Storage } from "../../storage/port.ts";

/** A source's db and its version. */
export interface SourceDb {
  data: Record<string, unknown>;
  version: number;
}

export class SourceDbs {
  readonly #store: Storage;
  /** Read at each write: `maxDbBytes` bounds one source's db. */
  readonly #config: Pick<Config, "maxDbBytes">;
  readonly #db = new Map<string, SourceDb>();
  /**
   * The version a source's db had when its cache was dropped (a failed commit, another node took the
   * source, the source was deleted). The executor may hold that version or a later one, built on writes
   * that never landed: the db read back from the store gets a version above it, so the executor takes it.
   */
  readonly #dropped = new BoundedCache<string, number>(10_000);

  constructor(store: Storage, config: Pick<Config, "maxDbBytes">) {
    this.#store = store;
    this.#config = config;
  }

  /** Drops the cached db, remembering its version (see `#dropped`). */
  drop(sourceId: string): void {
    const version = this.#db.get(sourceId)?.version;
    this.#db.delete(sourceId);
    if (version !== undefined)
      this.#dropped.set(sourceId, Math.max(version, this.#dropped.get(sourceId) ?? 0));
  }

  /** The source's db for its next invocation. */
  async of(sourceId: string): Promise<SourceDb> {
    let db = this.#db.get(sourceId);
    if (!db) {
      db = await this.#store.getSourceDb(sourceId);
      const dropped = this.#dropped.get(sourceId);
      if (dropped !== undefined) {
        db = { data: db.data, version: Math.max(db.version, dropped + 1) };
        this.#dropped.delete(sourceId);
      }
      this.#db.set(sourceId, db);
    }
    return db;
  }

  /**
   * Applies a successful run's db writes to the cache at once, so the next invocation sees them; the db
   * its commit stores, or undefined when there is none to store. Writes that would take the db over its
   * size limit fail the invocation instead (so a source's storage stays bounded); the version then jumps
   * by two, which makes the executor drop its copy and take ours.
   */
  apply(sourceId: string, result: InvokeResult): SourceDb | undefined {
    if (result.error || Object.keys(result.dbWrites).length === 0) return undefined;
    const current = this.#db.get(sourceId);
    if (!current) {
      // The cache was dropped while this run was out (an earlier commit failed, or the source moved):
      // its writes build on a db that never landed, and on an empty one they would replace the stored db.
      this.#dropped.set(sourceId, (this.#dropped.get(sourceId) ?? 0) + 1);
      result.error = {
        code: "db_stale",
        message:
          "An earlier invocation of this source failed to commit while this one ran; its db writes and emits were discarded",
      };
      return undefined;
    }
    const next = { data: { ...current.data, ...result.dbWrites }, version: current.version + 1 };
    for (const [k, v] of Object.entries(result.dbWrites)) if (v === undefined) delete next.data[k];
    const size = Buffer.byteLength(JSON.stringify(next.data));
    if (size > this.#config.maxDbBytes) {
      this.#db.set(sourceId, { data: current.data, version: current.version + 2 });
      result.error = {
        code: "db_too_large",
        message: `this.db would hold ${size} bytes, over the limit of ${this.#config.maxDbBytes}; the invocation's writes and emits were discarded`,
      };
      return undefined;
    }
    this.#db.set(sourceId, next);
    return next;
  }
}
