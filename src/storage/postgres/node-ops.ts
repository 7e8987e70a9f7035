/**
 * What several nodes share through the store (migration 005): the meta table, a sample sealed secret,
 * transaction-scoped advisory locks, and the API rate-limit windows (an UNLOGGED table).
 */
import type { NodeOps } from "../concerns.ts";
import { pruneRateLimitsSql, rateLimitHitSql, sealedSecretQueries, sealedValueIn } from "../shared-state.ts";
import type { Sql } from "./sql.ts";

const hitSql = rateLimitHitSql(["$1", "$2::bigint", "$3::bigint"]);

export function nodeOps(q: Sql): NodeOps {
  const getMeta = (key: string) =>
    q.get("SELECT value FROM meta WHERE key = $1", [key], (r) => r.value as string);
  return {
    getMeta,

    putMetaIfAbsent: async (key, value) => {
      await q.run("INSERT INTO meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING", [key, value]);
      return (await getMeta(key)) ?? value;
    },

    anySealedSecret: async () => {
      for (const text of sealedSecretQueries) {
        const found = await q.get(text, [], (r) => sealedValueIn(r.v as string));
        if (found !== undefined) return found;
      }
      return undefined;
    },

    // One lock space per schema, so that stores in different schemas of one database (tests, or two
    // installations) do not wait for each other; hashed in SQL, since the BIGINT would lose digits in JS.
    acquireTransactionLock: async (name) => {
      await q.run(
        "SELECT pg_advisory_xact_lock(hashtextextended('fount.' || current_schema() || '.' || $1, 0))",
        [name],
      );
    },

    countRateLimitHit: async (key, nowMs, windowMs) =>
      (await q.get(hitSql, [key, nowMs, windowMs], (r) => ({
        count: r.count as number,
        windowStartMs: r.window_start_ms as number,
      })))!,

    pruneRateLimits: (nowMs) => q.run(pruneRateLimitsSql("$1::bigint"), [nowMs]),
  };
}
