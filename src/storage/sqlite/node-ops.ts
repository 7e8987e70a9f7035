/**
 * The SQLite side of what nodes share through the store (migration 005): the meta table, a sample
 * sealed secret, transaction locks and API rate-limit windows. One process serves a SQLite store, so
 * these answer the same as in PostgreSQL without anything to coordinate.
 */
import type { NodeOps } from "../concerns.ts";
import { pruneRateLimitsSql, rateLimitHitSql, sealedSecretQueries, sealedValueIn } from "../shared-state.ts";
import type { Sql } from "./sql.ts";

const hitSql = rateLimitHitSql(["?1", "?2", "?3"]);

export function nodeOps(q: Sql): NodeOps {
  const getMeta = (key: string) =>
    q.get("SELECT value FROM meta WHERE key = ?", [key], (r) => r.value as string);
  return {
    getMeta: async (key) => getMeta(key),

    putMetaIfAbsent: async (key, value) => {
      q.run("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING", [key, value]);
      return getMeta(key) ?? value;
    },

    anySealedSecret: async () => {
      for (const text of sealedSecretQueries) {
        const found = q.get(text, [], (r) => sealedValueIn(r.v as string));
        if (found !== undefined) return found;
      }
      return undefined;
    },

    // One connection runs one transaction at a time: every transaction holds every lock already.
    acquireTransactionLock: async (_name) => {},

    countRateLimitHit: async (key, nowMs, windowMs) =>
      q.get(hitSql, [key, nowMs, windowMs], (r) => ({
        count: Number(r.count),
        windowStartMs: Number(r.window_start_ms),
      }))!,

    pruneRateLimits: async (nowMs) => q.run(pruneRateLimitsSql("?1"), [nowMs]),
  };
}
