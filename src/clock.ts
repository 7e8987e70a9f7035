/** Time as Fount reads it; tests inject a fake one for schedulers and retries. */
export interface Clock {
  /** Epoch milliseconds. */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

export function epochSeconds(clock: Clock = systemClock): number {
  return Math.floor(clock.now() / 1000);
}
