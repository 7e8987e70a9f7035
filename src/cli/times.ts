/**
 * Times on the command line (`--since`, `--until` of the deliveries lists, the event search and replay):
 * a duration back from now, epoch seconds, or a date or date-time.
 */
import { type Context, UsageError } from "./command.ts";

const units: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400 };

/**
 * A point in time as epoch seconds: a duration back from now (`90s`, `30m`, `2h`, `7d`), epoch seconds,
 * or a date or date-time (`2026-11-22`, `2026-11-22T21:40:00Z`); undefined when it is none of them.
 */
export function parseSince(raw: string, nowMs = Date.now()): number | undefined {
  const text = raw.trim();
  const ago = /^(\d+)\s*([smhd])$/.exec(text);
  if (ago) return Math.max(0, Math.floor(nowMs / 1000) - Number(ago[1]) * units[ago[2]!]!);
  if (/^\d+$/.test(text)) return Number(text);
  const ms = Date.parse(text);
  return Number.isNaN(ms) || !/^\d{4}-\d{2}-\d{2}/.test(text) ? undefined : Math.floor(ms / 1000);
}

/** A `--since`/`--until` value as epoch seconds; undefined when not given, a usage error when malformed. */
export function timeOf(ctx: Context, name: string): number | undefined {
  const raw = ctx.string(name);
  if (raw === undefined) return undefined;
  const at = parseSince(raw);
  if (at === undefined)
    throw new UsageError(
      `--${name} takes 30m, 2h, 7d, a date, a date-time or epoch seconds, not "${raw}"`,
      ctx.command.name,
    );
  return at;
}
