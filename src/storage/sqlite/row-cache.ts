/**
 * The rows the SQLite driver keeps in process memory, frozen: those every endpoint hit, timer tick,
 * delivery attempt and routed event reads. Unlike PostgreSQL's short-lived caches (postgres/row-cache.ts),
 * these are kept until a write through this connection changes them: while the server runs, it is the
 * only writer of these tables but for `fount admin` on the same file, which writes accounts only (users
 * are never updated or deleted). The accounts' cached rows are forgotten whenever another connection
 * committed (driver.ts reads `PRAGMA data_version` before using them). The operation files read and
 * forget them; a rolled-back transaction, which may have cached rows it wrote, forgets them all (`clear`).
 */
import { BoundedCache, ByteBoundedCache, estimatedBytes } from "../../bounded-cache.ts";
import type { ApiKey, Org, SourceRecord, Subscription, User, Webhook } from "../../domain/types.ts";

/** Rows cached per connection; a cache that grew past this starts over (endpoint probes cannot grow it). */
export const maxCachedRows = 10_000;

/**
 * Bytes of source rows kept in each of the two source caches. A source's configured props may hold about
 * 1 MiB, so 10,000 rows could take 10 GiB: with a count alone, 4,000 such sources filled the heap. Past
 * this the least recently read rows are let go and read again from the file at their next hit.
 */
export const maxCachedSourceBytes = 32 * 1024 * 1024;

const sourceCache = () =>
  new ByteBoundedCache<string, SourceRecord>({
    maxBytes: maxCachedSourceBytes,
    maxEntries: maxCachedRows,
    sizeOf: estimatedBytes,
  });

/** The driver's row caches (one set per connection). */
export class RowCache {
  /**
   * Sources by endpoint, read on every source endpoint hit. A write to `sources`, or a rolled-back
   * transaction that may have read its own uncommitted rows, clears the source caches.
   */
  readonly sourcesByEndpoint = sourceCache();
  /** The same rows by ID, read for every timer tick and source-to-source delivery; cleared with the above. */
  readonly sourcesById = sourceCache();
  readonly users = new BoundedCache<string, User>(maxCachedRows);
  /** Webhooks, read for every delivery attempt; each write to one here forgets it. */
  readonly webhooks = new BoundedCache<string, Webhook>(maxCachedRows);
  /**
   * What routing reads for every stored event: the owner of each emitter (sources and workflows, whose
   * owner never changes; deleting one forgets it) and the subscriptions matching an emitter, its owner
   * and a channel (any write to `subscriptions` forgets them all).
   */
  readonly emitterOwners = new BoundedCache<string, string>(maxCachedRows);
  readonly matches = new BoundedCache<string, Subscription[]>(maxCachedRows);
  /**
   * What every API request's key check reads (issue 29): live keys with their user by hash (revoking
   * one forgets them all; a revoked or unknown key is never kept), and each user's organizations (any
   * write to memberships forgets them all). Also forgotten when another connection wrote (`fount admin`).
   */
  readonly keys = new BoundedCache<string, { key: ApiKey; user: User }>(maxCachedRows);
  readonly orgsOfUser = new BoundedCache<string, Org[]>(maxCachedRows);

  /** Forgets the cached keys and memberships (a write to them here or through another connection). */
  forgetAccounts(): void {
    this.keys.clear();
    this.orgsOfUser.clear();
  }

  /** Forgets the cached sources (a write to `sources`). */
  forgetSources(): void {
    this.sourcesByEndpoint.clear();
    this.sourcesById.clear();
  }

  /** Forgets every cached row (window slots are window-slots.ts's, cleared with these by the driver). */
  clear(): void {
    this.webhooks.clear();
    this.forgetSources();
    this.emitterOwners.clear();
    this.matches.clear();
    this.forgetAccounts();
  }
}
