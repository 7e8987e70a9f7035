-- A delivery's first attempt is kept in its own row (docs/delivery.md, "Attempts"; issue 29): most
-- deliveries get one attempt, and its row in `delivery_attempts` (with that table's key index, the
-- foreign key's look-up and a statement of its own in the group commit) was about a sixth of the
-- pages the outbox writes per delivered event (docs/architecture.md, "A delivered event's writes").
-- The settlement's UPDATE, which rewrites the delivery's row anyway, now writes it there: a JSON array
-- of the attempt's columns in `delivery_attempts` order, less `delivery_id` and `n`
-- (src/storage/attempt-rows.ts, `firstAttemptText`). Later attempts, and a first attempt stored before
-- this migration, stay in `delivery_attempts`; reads join both.
ALTER TABLE deliveries ADD COLUMN first_attempt TEXT;

-- The subscription index serves two reads: the claims' in-order test of deliveries to sources (an older
-- pending delivery of the subscription holds a later one back) and marking a replay's deliveries (their
-- `subscription_id` is the replay's `rpl_…`). It held every pending delivery, so that each webhook
-- delivery entered it in its INSERT and left it in its settlement, for reads that never ask for it. Now it
-- holds the pending rows those reads look for; both name its condition in their own WHERE.
DROP INDEX deliveries_subscription;
CREATE INDEX deliveries_subscription ON deliveries(subscription_id, seq)
  WHERE status = 'pending' AND (substr(listener_id, 1, 3) = 'dc_' OR substr(subscription_id, 1, 4) = 'rpl_');
