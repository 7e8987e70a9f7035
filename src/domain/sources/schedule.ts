/** When a timer fires next. After downtime a missed tick fires once: the next slot is always in the future. */
import { Cron } from "croner";
import type { TimerConfig } from "../components/props.ts";

/** The first run of a timer at or after `fromMs` (interval timers first fire one interval after deploy). */
export function firstRun(config: TimerConfig, fromMs: number): number {
  if (config.intervalSeconds) return fromMs + config.intervalSeconds * 1000;
  return cronNext(config, fromMs);
}

/** The next slot strictly after `nowMs`, following the slot `scheduledMs` that just fired. */
export function nextRun(config: TimerConfig, scheduledMs: number, nowMs: number): number {
  if (config.intervalSeconds) {
    const period = config.intervalSeconds * 1000;
    const missed = Math.max(0, Math.floor((nowMs - scheduledMs) / period));
    return scheduledMs + (missed + 1) * period;
  }
  return cronNext(config, Math.max(scheduledMs, nowMs));
}

function cronNext(config: TimerConfig, afterMs: number): number {
  const cron = new Cron(config.cron!, { paused: true, timezone: config.timezone ?? "UTC" });
  const next = cron.nextRun(new Date(afterMs));
  cron.stop();
  // A pattern that never fires again (a past date) parks the timer far in the future.
  return next ? next.getTime() : Number.MAX_SAFE_INTEGER;
}
