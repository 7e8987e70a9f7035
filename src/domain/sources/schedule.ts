/** When a timer fires next. After downtime a missed tick fires once: the next slot is always in the future. */
import { Cron } from "croner";
import { BoundedCache } from "../../bounded-cache.ts";
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

/**
 * Parsed patterns by timezone and expression. Every tick of a cron timer asks for its next slot, and
 * parsing the pattern each time was a third of that (134 against 90 µs a slot for `* * * * * *` here),
 * and 83 KB of garbage per tick (a parsed pattern's size). So only a hundred are kept (8 MB): a full
 * cache starts over, which costs the parses again, as before, and a long expression (a list of many
 * values) is never kept. A paused `Cron` without a function schedules nothing, so a kept one holds no timer.
 */
const patterns = new BoundedCache<string, Cron>(100);
const longestKeptPattern = 200;

function cronNext(config: TimerConfig, afterMs: number): number {
  const timezone = config.timezone ?? "UTC";
  const parse = () => new Cron(config.cron!, { paused: true, timezone });
  const cron =
    config.cron!.length > longestKeptPattern
      ? parse()
      : patterns.getOrSet(`${timezone}\0${config.cron}`, parse);
  const next = cron.nextRun(new Date(afterMs));
  // A pattern that never fires again (a past date) parks the timer far in the future.
  return next ? next.getTime() : Number.MAX_SAFE_INTEGER;
}
