-- Each rate-limit window keeps its end, so that the prune forgets the windows that ended, whatever their
-- length: the API limiter's minute and a backfill's hour share the table (docs/delivery.md, "Backfill").
-- Before, the prune deleted the windows that began over a minute ago, and the backfill count was stored
-- an hour ahead of the clock to outlive it. Existing rows: the API's windows are a minute long; a
-- backfill row's start was its end, so its start goes back an hour.
ALTER TABLE rate_limits ADD COLUMN window_ends_ms INTEGER NOT NULL DEFAULT 0;
UPDATE rate_limits SET window_start_ms = window_start_ms - 3600000 WHERE key LIKE 'backfill:%';
UPDATE rate_limits SET window_ends_ms = window_start_ms + CASE WHEN key LIKE 'backfill:%' THEN 3600000 ELSE 60000 END;
