/** Time as Fount reads it; tests inject a fake one for schedulers and retries. */
export interface Clock {
  /** Epoch milliseconds. */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

export function epochSeconds(clock: Clock = systemClock): number {
  return Math.floor(clock.now() / 1000);
}

/**
 * The last instant a JavaScript Date holds (year 275760), in epoch ms: the bound of every time Fount takes
 * (API parameters, an emit's `delivery_ts`). Past it a time is no Date, and past 2^53 no integer either:
 * SQLite stored one that JavaScript could not read back, PostgreSQL's bigint refused one past 2^63.
 */
export const maxTimeMs = 8.64e15;
