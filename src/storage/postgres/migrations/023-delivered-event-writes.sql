-- A delivery's first attempt is kept in its own row (mirrors sqlite/migrations/023; the number is the
-- SQLite driver's, so that a version means the same point in both): the settlement's UPDATE, which
-- rewrites the delivery's row anyway, writes it there, and a delivered event no longer costs a row of
-- `delivery_attempts` with its key index and foreign-key check. A JSON array of the attempt's columns in
-- `delivery_attempts` order, less `delivery_id` and `n` (src/storage/attempt-rows.ts,
-- `firstAttemptText`); text, not jsonb, so that the write does not parse it (reads cast it). Later
-- attempts, and a first attempt stored before this migration, stay in `delivery_attempts`; reads join both.
ALTER TABLE deliveries ADD COLUMN first_attempt TEXT;

-- The subscription index holds only the pending rows its two reads look for (mirrors
-- sqlite/migrations/023): deliveries to sources, for the claims' in-order test, and replays' deliveries,
-- for marking them (their `subscription_id` is the replay's `rpl_…`). A webhook's delivery no longer
-- enters it in its INSERT and leaves it in its settlement. Both reads state its condition.
DROP INDEX deliveries_subscription;
CREATE INDEX deliveries_subscription ON deliveries(subscription_id, seq)
  WHERE status = 'pending' AND (listener_kind = 'source' OR substr(subscription_id, 1, 4) = 'rpl_');
