/** Waiting on a count that other processes move (deliveries received, events streamed). */
import { sleep } from "./processes.ts";

export interface PollOptions<T> {
  /** True once the wait is over. */
  done: (value: T) => boolean;
  /** A figure that grows while work is still arriving. */
  progress: (value: T) => number;
  /** Give up when `progress` did not move for this long. */
  quietMs: number;
  /** Give up after this long in any case; unset, only quiet ends an unfinished wait. */
  maxMs?: number;
  everyMs: number;
}

/** Reads `read` until `done`, until progress stalls or time runs out; resolves with the last value read. */
export async function pollUntil<T>(read: () => Promise<T>, o: PollOptions<T>): Promise<T> {
  const end = Date.now() + (o.maxMs ?? Number.POSITIVE_INFINITY);
  let last = -1;
  let lastChange = Date.now();
  for (;;) {
    const value = await read();
    if (o.done(value)) return value;
    const progress = o.progress(value);
    if (progress !== last) {
      last = progress;
      lastChange = Date.now();
    }
    if (Date.now() - lastChange > o.quietMs || Date.now() > end) return value;
    await sleep(o.everyMs);
  }
}
