-- Retention the owner chooses (issue 28, docs/streams.md "Retention"; mirrors postgres/migrations/011).
-- A source's policy, `{"events": n, "days": d}` as JSON, NULL for the instance's defaults.
ALTER TABLE sources ADD COLUMN retention_json TEXT;

-- Windows of up to 1,000,000 events: the numbered slots of migration 004, which a new event overwrote
-- once its window was full, needed each window's slot numbers in memory and bounded a window by its
-- insert. Events are now appended, listed and pruned by their ID within their channel, and the
-- background pruner (domain/events/pruner.ts) deletes the oldest in small batches. The slot column goes
-- with its index (SQLite 3.35 drops a column in place: the table keeps its rowids and its triggers).
DROP INDEX events_window;
ALTER TABLE events DROP COLUMN slot;
CREATE UNIQUE INDEX events_order ON events(emitter_id, channel, id_ms, id_seq);
