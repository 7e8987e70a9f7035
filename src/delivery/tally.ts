/**
 * Counts by key for the dispatcher's bookkeeping (deliveries per destination, per listener). A count
 * that reaches zero leaves its map, so that destinations and listeners no longer in use are forgotten.
 */

/** Adds `delta` to the count of `key`; a count that reaches zero leaves the map. */
export function adjust(counts: Map<string, number>, key: string, delta: number): void {
  const n = (counts.get(key) ?? 0) + delta;
  if (n > 0) counts.set(key, n);
  else counts.delete(key);
}
