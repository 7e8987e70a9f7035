/**
 * When a failed delivery is tried again: about 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 10 h after the
 * attempts that failed (eight attempts in all, spread over about 28 hours, so that a receiver down for a day
 * still gets everything), each delay moved by up to ±10 % so that retries of one outage do not arrive together.
 */
export const retryDelaysMs: readonly number[] = [
  5_000,
  5 * 60_000,
  30 * 60_000,
  2 * 3_600_000,
  5 * 3_600_000,
  10 * 3_600_000,
  10 * 3_600_000,
];

/** Attempts of one delivery before it fails for good: the first one and one per retry delay. */
export const maxAttempts = retryDelaysMs.length + 1;

/** ±10 %: enough to spread a burst of retries, small enough to keep the table meaningful. */
const jitter = 0.1;

/** A receiver's Retry-After is honoured up to a day; anything longer is likely a mistake on its side. */
export const maxRetryAfterMs = 24 * 3_600_000;

/**
 * The delay before the next attempt after `attemptsMade` attempts of this round failed, or undefined when
 * the schedule is used up. `random` gives [0, 1) (injectable so tests can pin the jitter).
 */
export function retryDelay(attemptsMade: number, random: () => number = Math.random): number | undefined {
  const base = retryDelaysMs[attemptsMade - 1];
  if (base === undefined) return undefined;
  return Math.round(base * (1 + (random() * 2 - 1) * jitter));
}

/** Retry-After as seconds or an HTTP date, in ms from `nowMs` (at least 1 s, at most a day); undefined when absent or malformed. */
export function parseRetryAfter(value: string | string[] | undefined, nowMs: number): number | undefined {
  const raw = (Array.isArray(value) ? value[0] : value)?.trim();
  if (!raw) return undefined;
  let ms: number;
  if (/^\d{1,10}$/.test(raw)) ms = Number(raw) * 1000;
  else if (!/[a-z]/i.test(raw))
    return undefined; // `-5`, `1.5`: neither seconds nor a date
  else {
    const at = Date.parse(raw);
    if (Number.isNaN(at)) return undefined;
    ms = at - nowMs;
  }
  return Math.min(Math.max(ms, 1000), maxRetryAfterMs);
}
