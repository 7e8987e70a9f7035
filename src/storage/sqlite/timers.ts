/** Timers of sources: each prop's next due time, claimed tick by tick by compare-and-set. */
import type { TimerOps } from "../concerns.ts";
import { toTimer } from "../rows.ts";
import { limitParam } from "./rows.ts";
import type { Sql } from "./sql.ts";

export function timerOps(q: Sql): TimerOps {
  return {
    replaceTimers: async (sourceId, timers) => {
      q.run("DELETE FROM timers WHERE source_id = ?", [sourceId]);
      for (const t of timers) {
        q.run(
          "INSERT INTO timers (source_id, prop_name, interval_seconds, cron, timezone, next_run_ms) VALUES (?, ?, ?, ?, ?, ?)",
          [t.sourceId, t.propName, t.intervalSeconds, t.cron, t.timezone, t.nextRunMs],
        );
      }
    },

    listTimers: async (sourceId) =>
      q.all("SELECT * FROM timers WHERE source_id = ? ORDER BY prop_name", [sourceId], toTimer),

    dueTimers: async (nowMs, limit) =>
      q.all(
        `SELECT * FROM timers WHERE next_run_ms <= ? ORDER BY next_run_ms ${limitParam}`,
        [nowMs, limit],
        toTimer,
      ),

    claimTimer: async (sourceId, propName, expectedNextMs, nextMs) =>
      q.run("UPDATE timers SET next_run_ms = ? WHERE source_id = ? AND prop_name = ? AND next_run_ms = ?", [
        nextMs,
        sourceId,
        propName,
        expectedNextMs,
      ]) > 0,

    nextTimerMs: async () => {
      const row = q.prepare("SELECT min(next_run_ms) AS m FROM timers").get() as { m: number | null };
      return row.m ?? undefined;
    },
  };
}
