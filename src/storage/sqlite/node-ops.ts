/**
 * The SQLite side of what nodes share through the store (migration 005): the meta table, a sample
 * sealed secret and API rate-limit windows. One process serves a SQLite store, so these answer the same
 * as in PostgreSQL without anything to coordinate. `SqliteOps` delegates here.
 */
import type { RateLimitCount } from "../port.ts";
import { rateLimitHitSql, sealedSecretQueries, sealedValueIn } from "../shared-state.ts";
import type { SqlHelpers } from "./delivery-ops.ts";

const hitSql = rateLimitHitSql(["?1", "?2", "?3"]);

export class SqliteNodeOps {
  readonly #q: SqlHelpers;

  constructor(helpers: SqlHelpers) {
    this.#q = helpers;
  }

  getMeta(key: string): string | undefined {
    return this.#q.get("SELECT value FROM meta WHERE key = ?", [key], (r) => r.value as string);
  }

  putMetaIfAbsent(key: string, value: string): string {
    this.#q.run("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING", [key, value]);
    return this.getMeta(key) ?? value;
  }

  anySealedSecret(): string | undefined {
    for (const text of sealedSecretQueries) {
      const found = this.#q.get(text, [], (r) => sealedValueIn(r.v as string));
      if (found !== undefined) return found;
    }
    return undefined;
  }

  countRateLimitHit(key: string, nowMs: number, windowMs: number): RateLimitCount {
    return this.#q.get(hitSql, [key, nowMs, windowMs], (r) => ({
      count: Number(r.count),
      windowStartMs: Number(r.window_start_ms),
    }))!;
  }

  pruneRateLimits(beforeMs: number): number {
    return this.#q.run("DELETE FROM rate_limits WHERE window_start_ms < ?", [beforeMs]);
  }
}
