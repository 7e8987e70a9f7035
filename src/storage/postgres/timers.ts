import type { TimerOps } from "../concerns.ts";
import { toTimer } from "../rows.ts";
import type { Sql } from "./sql.ts";

export function timerOps(q: Sql): TimerOps {
  return {
    replaceTimers: async (sourceId, timers) => {
      await q.run("DELETE FROM timers WHERE source_id = $1", [sourceId]);
      for (const t of timers) {
        await q.run(
          `INSERT INTO timers (source_id, prop_name, interval_seconds, cron, timezone, next_run_ms)
           VALUES ($1, $2, $3, $4, $5, $6)`,
          [t.sourceId, t.propName, t.intervalSeconds, t.cron, t.timezone, t.nextRunMs],
        );
      }
    },

    listTimers: (sourceId) =>
      q.all("SELECT * FROM timers WHERE source_id = $1 ORDER BY prop_name", [sourceId], toTimer),

    dueTimers: (nowMs, limit) =>
      q.all(
        "SELECT * FROM timers WHERE next_run_ms <= $1 ORDER BY next_run_ms LIMIT $2",
        [nowMs, limit],
        toTimer,
      ),

    // A compare-and-set on the due time: of several nodes claiming one tick, one row update wins.
    claimTimer: async (sourceId, propName, expectedNextMs, nextMs) =>
      (await q.run(
        "UPDATE timers SET next_run_ms = $1 WHERE source_id = $2 AND prop_name = $3 AND next_run_ms = $4",
        [nextMs, sourceId, propName, expectedNextMs],
      )) > 0,

    nextTimerMs: async () =>
      (await q.get("SELECT min(next_run_ms) AS m FROM timers", [], (r) => r.m as number | null)) ?? undefined,
  };
}
