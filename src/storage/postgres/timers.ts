/** Timer interfaces of sources: when each fires next, and claims of due ticks. */
import type { TimerRecord } from "../../domain/types.ts";
import type { StorageOps } from "../port.ts";
import type { Row, Sql } from "./sql.ts";

export type TimerOps = Pick<
  StorageOps,
  "replaceTimers" | "listTimers" | "dueTimers" | "claimTimer" | "nextTimerMs"
>;

const toTimer = (r: Row): TimerRecord => ({
  sourceId: r.source_id as string,
  propName: r.prop_name as string,
  intervalSeconds: (r.interval_seconds as number | null) ?? null,
  cron: (r.cron as string | null) ?? null,
  timezone: (r.timezone as string | null) ?? null,
  nextRunMs: r.next_run_ms as number,
});

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
