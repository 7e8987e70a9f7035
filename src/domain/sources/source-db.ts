/**
 * Each source's `this.db` as the runner holds it: the db its last finished invocation left (the store
 * has it too once committed), read from the store on first use, and a run's writes applied to it at
 * once so the next invocation sees them. Versions only grow, so an executor's cached copy is replaced
 * whenever ours differs from what it built on.
 *
 * The cache holds at most `dbCacheBytes` of db JSON across sources (each db may hold 4 MiB, and a server
 * may run thousands of sources: kept for ever, they took the server's heap, about 3.9 MB a source).
 * Past it, the least recently used dbs that no invocation is using and whose writes are committed are
 * let go; the next invocation reads them from the store again.
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

/** A cached db: with its size, the invocations using it, and whether the store holds this version. */
interface Cached extends SourceDb {
  bytes: number;
  /** Invocations between `of` and `release`: their results apply to this entry, so it stays. */
  users: number;
  /** The version whose writes `data` holds last (a refused write moves `version` on, not this). */
  dataVersion: number;
  /** The store holds `data` (read from it, or committed since): letting it go loses nothing. */
  stored: boolean;
}

export class SourceDbs {
  readonly #store: Storage;
  /** Read at each write: `maxDbBytes` bounds one source's db, `dbCacheBytes` all that are cached. */
  readonly #config: Pick<Config, "maxDbBytes" | "dbCacheBytes">;
  /** Least recently used first. */
  readonly #db = new Map<string, Cached>();
  #bytes = 0;
  /**
   * The version a source's db had when its cache was dropped or let go (a failed commit, another node
   * took the source, the source was deleted, the cache was full). The executor may hold that version or
   * a later one, built on writes that never landed: the db read back from the store gets a version above
   * it, so the executor takes it.
   */
  readonly #dropped = new BoundedCache<string, number>(10_000);

  constructor(store: Storage, config: Pick<Config, "maxDbBytes" | "dbCacheBytes">) {
    this.#store = store;
    this.#config = config;
  }

  /** The bytes of db JSON cached now (for tests and metrics). */
  get cachedBytes(): number {
    return this.#bytes;
  }

  /** Drops the cached db, remembering its version (see `#dropped`). */
  drop(sourceId: string): void {
    const cached = this.#db.get(sourceId);
    if (!cached) return;
    this.#remove(sourceId, cached);
    this.#dropped.set(sourceId, Math.max(cached.version, this.#dropped.get(sourceId) ?? 0));
  }

  /**
   * The source's db for its next invocation, held for it until `release` (read it at once: it changes
   * as later results apply). The caller releases it once the invocation's commit settled, or failed.
   */
  async of(sourceId: string): Promise<SourceDb> {
    let cached = this.#db.get(sourceId);
    if (cached) {
      // Most recently used: last in the map's order.
      this.#db.delete(sourceId);
      this.#db.set(sourceId, cached);
    } else {
      const read = await this.#store.getSourceDb(sourceId);
      cached = this.#db.get(sourceId);
      if (!cached) {
        const dropped = this.#dropped.get(sourceId);
        if (dropped !== undefined) this.#dropped.delete(sourceId);
        const version = dropped === undefined ? read.version : Math.max(read.version, dropped + 1);
        const bytes = sizeOf(read.data);
        cached = { data: read.data, version, dataVersion: version, bytes, users: 0, stored: true };
        this.#put(sourceId, cached);
      }
    }
    cached.users++;
    return cached;
  }

  /**
   * An invocation given `db` by `of` is done with it: its commit settled, or it never will. A db dropped
   * meanwhile (and perhaps read again for others) is no longer the invocation's to release.
   */
  release(sourceId: string, db: SourceDb): void {
    const cached = this.#db.get(sourceId);
    if (cached === db && cached.users > 0) cached.users--;
    this.#trim();
  }

  /** The version of the source's cached db, if cached: every result applied so far led to it. */
  versionOf(sourceId: string): number | undefined {
    return this.#db.get(sourceId)?.version;
  }

  /** The store committed the db of this version (`apply`'s answer): letting it go loses nothing now. */
  committed(sourceId: string, version: number): void {
    const cached = this.#db.get(sourceId);
    if (cached && cached.dataVersion === version) cached.stored = true;
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
    const data = { ...current.data, ...result.dbWrites };
    for (const [k, v] of Object.entries(result.dbWrites)) if (v === undefined) delete data[k];
    const size = sizeOf(data);
    if (size > this.#config.maxDbBytes) {
      // The data stays as it was: stored still if it was, under the new version.
      current.version += 2;
      result.error = {
        code: "db_too_large",
        message: `this.db would hold ${size} bytes, over the limit of ${this.#config.maxDbBytes}; the invocation's writes and emits were discarded`,
      };
      return undefined;
    }
    this.#bytes += size - current.bytes;
    current.version++;
    Object.assign(current, { data, dataVersion: current.version, bytes: size, stored: false });
    return { data, version: current.version };
  }

  #put(sourceId: string, cached: Cached): void {
    this.#db.set(sourceId, cached);
    this.#bytes += cached.bytes;
  }

  #remove(sourceId: string, cached: Cached): void {
    this.#db.delete(sourceId);
    this.#bytes -= cached.bytes;
  }

  /**
   * Lets go of the least recently used dbs nobody uses and the store holds, until the cache is within
   * its budget (those in use or not yet committed stay, over it if need be).
   */
  #trim(): void {
    if (this.#bytes <= this.#config.dbCacheBytes) return;
    for (const [sourceId, cached] of this.#db) {
      if (this.#bytes <= this.#config.dbCacheBytes) return;
      if (cached.users > 0 || !cached.stored) continue;
      this.#remove(sourceId, cached);
      this.#dropped.set(sourceId, Math.max(cached.version, this.#dropped.get(sourceId) ?? 0));
    }
  }
}

function sizeOf(data: Record<string, unknown>): number {
  return Buffer.byteLength(JSON.stringify(data));
}
