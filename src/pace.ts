/**
 * The pause between two batches of background work that shares the event loop (and the store) with
 * requests: the event pruner's, the finished deliveries' prune, the parked ones' unparking, a
 * redeliver's requeue. At least as long as the batch took, so that other work gets as much time as it
 * did, and at least as long as keeps the work within `ratePerS` items a second when one is given; a
 * batch under a millisecond yields to the event loop once instead.
 */
export function pauseAfterBatch(
  batchMs: number,
  items = 0,
  ratePerS = Number.POSITIVE_INFINITY,
): Promise<void> {
  const ms = Math.max(batchMs, (items / ratePerS) * 1000);
  return new Promise<void>((resolve) => (ms >= 1 ? setTimeout(resolve, ms) : setImmediate(resolve)));
}

/**
 * Runs `batch(limit)` until one does fewer than `limit` (or `stopped` says so before the next), with
 * `pauseAfterBatch` between two; resolves with how many all did.
 */
export async function inPacedBatches(
  limit: number,
  batch: (limit: number) => Promise<number>,
  pace: { ratePerS?: number; stopped?: () => boolean } = {},
): Promise<number> {
  let done = 0;
  while (!pace.stopped?.()) {
    const started = performance.now();
    const n = await batch(limit);
    done += n;
    if (n < limit) break;
    await pauseAfterBatch(performance.now() - started, n, pace.ratePerS);
  }
  return done;
}
