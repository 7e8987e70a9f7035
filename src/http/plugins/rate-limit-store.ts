/**
 * A store for @fastify/rate-limit that counts in the database, so that the API rate limit holds for all
 * nodes of a cluster together (each node's in-memory count would let a client send the limit to each).
 * Used when the store is shared by nodes; one SQLite node keeps the plugin's in-memory store.
 */
import type { FastifyRateLimitStore, FastifyRateLimitStoreCtor } from "@fastify/rate-limit";
import type { Storage } from "../../storage/port.ts";

/** Windows that ended are deleted this often (each node does it; the delete is cheap and idempotent). */
const pruneEveryMs = 60_000;

/** A store class (the plugin constructs it) counting every hit in `store` with the time from `now`. */
export function sharedRateLimitStore(store: Storage, now: () => number): FastifyRateLimitStoreCtor {
  let lastPruneMs = 0;
  class SharedRateLimitStore implements FastifyRateLimitStore {
    incr(
      key: string,
      callback: (error: Error | null, result?: { current: number; ttl: number }) => void,
      timeWindow: number,
    ): void {
      const at = now();
      store.countRateLimitHit(key, at, timeWindow).then(
        ({ count, windowStartMs }) =>
          callback(null, { current: count, ttl: Math.max(0, windowStartMs + timeWindow - at) }),
        (err: Error) => callback(err),
      );
      if (at - lastPruneMs >= pruneEveryMs) {
        lastPruneMs = at;
        store.pruneRateLimits(at).catch(() => undefined);
      }
    }

    child(): FastifyRateLimitStore {
      return new SharedRateLimitStore();
    }
  }
  return SharedRateLimitStore;
}
