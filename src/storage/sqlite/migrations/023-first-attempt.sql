-- A delivery's first attempt is kept in its own row (docs/delivery.md, "Attempts"; issue 29): most
-- deliveries get one attempt, and its row in `delivery_attempts` (with that table's key index, the
-- foreign key's look-up and a statement of its own in the group commit) cost about a third of the
-- outbox's SQLite time per delivered event. The settlement's UPDATE, which rewrites the delivery's row
-- anyway, now writes it there: a JSON array of the attempt's columns in `delivery_attempts` order, less
-- `delivery_id` and `n` (src/storage/attempt-rows.ts, `firstAttemptText`). Later attempts, and a first
-- attempt stored before this migration, stay in `delivery_attempts`; reads join both.
ALTER TABLE deliveries ADD COLUMN first_attempt TEXT;
