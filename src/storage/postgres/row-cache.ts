/**
 * Short-lived caches of the rows every endpoint hit, API request and group commit reads: a source by its
 * endpoint, a user, an API key with its user and the user's organizations, an emitter's owner, the
 * subscriptions matching an emitter's channel. Read from the database each time, they cost two queries
 * per hit or request and two round trips per commit (docs/architecture.md, "Row caches").
 *
 * Several nodes may change these rows, so an entry is trusted for `ttlMs` at most, and a change made
 * through any node clears its kind at once on every node: this node's writes clear it here and are
 * reported to `onChange` (cluster-link.ts sends them to the others, whose link calls `forget`). A read
 * that started before a change is not kept, so a cache never holds a row older than the last change it
 * heard of. Misses (no row) are never kept: a source deployed through another node is found at once.
 */
import { ByteBoundedCache, estimatedBytes } from "../../bounded-cache.ts";
import type { Org, Subscription } from "../../domain/types.ts";
import type { StorageOps } from "../port.ts";
import { deepFreeze } from "../rows.ts";

/**
 * What a change clears: rows of sources and workflows, of users, of subscriptions, and `accounts`: live
 * API keys (with their user) and each user's organizations.
 */
export type CacheKind = "sources" | "users" | "subscriptions" | "accounts";

export const cacheKinds: readonly CacheKind[] = ["sources", "users", "subscriptions", "accounts"];

/**
 * How long an entry is trusted without hearing of a change. A node that misses a change message (its
 * listening connection broke) still sees it within this, which keeps "a deleted source answers 404 on
 * every node within 1 s" with room for a round trip; at thousands of hits per second it still saves all
 * but one read per row and half-second.
 */
export const rowCacheTtlMs = 500;

/** Entries per kind; past it the least recently read are let go (endpoint probes cannot grow it). */
const maxEntries = 10_000;

/**
 * Bytes of rows per kind, each row's size estimated once when kept: a source's configured props may hold
 * about 1 MiB, so a count alone let 10,000 such rows take 10 GiB of heap.
 */
export const maxCachedBytes = 32 * 1024 * 1024;

interface Entry {
  value: unknown;
  expiresAt: number;
}

export class RowCache {
  readonly #ttlMs: number;
  readonly #now: () => number;
  readonly #entries = new Map<CacheKind, ByteBoundedCache<string, Entry>>();
  /** Reads under way, shared by concurrent misses of one key. */
  readonly #loading = new Map<CacheKind, Map<string, Promise<unknown>>>();
  /** Bumped by every change of a kind: a read that saw another generation when it began is not kept. */
  readonly #generation = new Map<CacheKind, number>();
  readonly #listeners: Array<(kinds: CacheKind[]) => void> = [];

  constructor(options: { ttlMs?: number; now?: () => number } = {}) {
    this.#ttlMs = options.ttlMs ?? rowCacheTtlMs;
    this.#now = options.now ?? Date.now;
    for (const kind of cacheKinds) {
      this.#entries.set(
        kind,
        new ByteBoundedCache<string, Entry>({
          maxBytes: maxCachedBytes,
          maxEntries,
          sizeOf: (entry) => estimatedBytes(entry.value),
        }),
      );
      this.#loading.set(kind, new Map());
      this.#generation.set(kind, 0);
    }
  }

  /** The cached row of `key`, or `load`'s answer, kept (frozen) when it is a row. */
  read<T>(kind: CacheKind, key: string, load: () => Promise<T | undefined>): Promise<T | undefined> {
    const entry = this.#entries.get(kind)!.get(key);
    if (entry && entry.expiresAt > this.#now()) return Promise.resolve(entry.value as T);
    const loading = this.#loading.get(kind)!;
    const pending = loading.get(key);
    if (pending) return pending as Promise<T | undefined>;
    const generation = this.#generation.get(kind);
    const expiresAt = this.#now() + this.#ttlMs;
    const read = load().then(
      (value) => {
        if (loading.get(key) === read) loading.delete(key);
        if (value === undefined) return undefined;
        deepFreeze(value);
        if (this.#generation.get(kind) === generation)
          this.#entries.get(kind)!.set(key, { value, expiresAt });
        return value;
      },
      (err: unknown) => {
        if (loading.get(key) === read) loading.delete(key);
        throw err;
      },
    );
    loading.set(key, read);
    return read;
  }

  /** This node changed rows of `kinds` (committed): forgets them here and tells `onChange` listeners. */
  changed(kinds: Iterable<CacheKind>): void {
    const list = [...new Set(kinds)];
    if (list.length === 0) return;
    this.forget(list);
    for (const listener of this.#listeners) listener(list);
  }

  /** Forgets every entry of `kinds` (a change heard from another node, or messages that may have been missed). */
  forget(kinds: Iterable<CacheKind>): void {
    for (const kind of kinds) {
      this.#entries.get(kind)?.clear();
      this.#loading.get(kind)?.clear();
      this.#generation.set(kind, (this.#generation.get(kind) ?? 0) + 1);
    }
  }

  /** Calls `listener` with the kinds of every change made through this node. */
  onChange(listener: (kinds: CacheKind[]) => void): void {
    this.#listeners.push(listener);
  }
}

/** The writes that change cached rows, by the kind they make stale. */
const writesOf: Record<CacheKind, ReadonlyArray<keyof StorageOps>> = {
  sources: ["insertSource", "updateSource", "deleteSource", "insertWorkflow", "deleteWorkflow"],
  users: ["insertUser"],
  subscriptions: [
    "upsertSubscription",
    "deleteSubscriptions",
    "deleteSubscriptionsOf",
    "deleteRoutesBetween",
  ],
  // A new key or organization is no stale row: misses are never kept, and a member joins by putMember.
  accounts: ["revokeApiKey", "putMember", "deleteMember"],
};

/** Emitters whose owner is cached: a source's or a workflow's owner never changes. */
const ownerCached = /^(dc|p)_/;

/**
 * `ops` with the cached reads answered from `cache`, and its writes reported. Outside a transaction
 * (`tx` undefined) a write is reported once it is done. In a transaction, the kinds it wrote are added
 * to `tx.written` (the driver reports them once it committed or rolled back, so that no node re-reads
 * the rows before the change is visible), and its reads of those kinds bypass the cache, which holds
 * only committed rows, so that the transaction sees its own writes.
 */
export function withRowCache(ops: StorageOps, cache: RowCache, tx?: { written: Set<CacheKind> }): StorageOps {
  const cached = (kind: CacheKind) => tx === undefined || !tx.written.has(kind);
  const wrapped: StorageOps = {
    ...ops,
    getSourceByEndpoint: (endpointId) =>
      cached("sources")
        ? cache.read("sources", `endpoint\0${endpointId}`, () => ops.getSourceByEndpoint(endpointId))
        : ops.getSourceByEndpoint(endpointId),
    getUser: (id) => (cached("users") ? cache.read("users", id, () => ops.getUser(id)) : ops.getUser(id)),
    findApiKeyByHash: (hash) =>
      cached("accounts")
        ? cache.read("accounts", `key\0${hash}`, () => ops.findApiKeyByHash(hash))
        : ops.findApiKeyByHash(hash),
    listOrgsOfUser: (userId) =>
      cached("accounts")
        ? (cache.read("accounts", `orgs\0${userId}`, () => ops.listOrgsOfUser(userId)) as Promise<Org[]>)
        : ops.listOrgsOfUser(userId),
    resourceOwner: (id) =>
      ownerCached.test(id) && cached("sources")
        ? cache.read("sources", `owner\0${id}`, () => ops.resourceOwner(id))
        : ops.resourceOwner(id),
    matchSubscriptions: (emitterId, ownerId, channel) =>
      cached("subscriptions")
        ? (cache.read("subscriptions", `${emitterId}\0${ownerId ?? ""}\0${channel}`, () =>
            ops.matchSubscriptions(emitterId, ownerId, channel),
          ) as Promise<Subscription[]>)
        : ops.matchSubscriptions(emitterId, ownerId, channel),
  };
  const target = wrapped as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
  for (const kind of cacheKinds) {
    for (const name of writesOf[kind]) {
      const write = target[name]!;
      target[name] = tx
        ? (...args) => {
            tx.written.add(kind);
            return write(...args);
          }
        : async (...args) => {
            try {
              return await write(...args);
            } finally {
              // Also after a failed write: it may have changed rows before it failed.
              cache.changed([kind]);
            }
          };
    }
  }
  return wrapped;
}
