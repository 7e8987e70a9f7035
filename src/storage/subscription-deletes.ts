/**
 * What deleting a subscription leaves to batches, in both drivers' words: its pending deliveries go
 * `deliveryDeleteBatch` a transaction, marked meanwhile in `subscription_deletes` (migration 029 of SQLite, 031 of PostgreSQL), which
 * the claims read so that none of them is sent. One transaction of 300,000 held SQLite's writer (every
 * tenant's ingest) for as long as it took (docs/delivery.md, "Deleting a subscription").
 */

/**
 * Pending deliveries deleted per transaction: a few tens of milliseconds of the writer each (the probe of
 * docs/delivery.md measured them), so that ingest waits at most that long between batches.
 */
export const deliveryDeleteBatch = 2000;

/**
 * A batch of a deleted subscription's unclaimed pending deliveries (placeholders: listener, subscription,
 * limit; `hint`: SQLite's `INDEXED BY` for the claims' index, which holds the listener, or empty).
 */
export const unclaimedBatchSql = (p: [string, string, string], hint: string) =>
  `DELETE FROM deliveries WHERE seq IN (SELECT seq FROM deliveries ${hint}
     WHERE status = 'pending' AND claimed_by IS NULL AND listener_id = ${p[0]} AND subscription_id = ${p[1]}
     LIMIT ${p[2]})`;

/**
 * A claim's test that delivery `d`'s subscription is not being deleted, in its scan: a deleted backlog at
 * the head of the queue, left out only when taken, filled each claim's page and held back every delivery
 * due after it until the last batch. The table is usually empty, and tested first: SQLite then answers a
 * candidate from the claims' index alone, without reading the row for its subscription.
 */
export const subscriptionKept = (d: string) =>
  `(NOT EXISTS (SELECT 1 FROM subscription_deletes) OR NOT EXISTS (SELECT 1 FROM subscription_deletes sd WHERE sd.id = ${d}.subscription_id))`;
