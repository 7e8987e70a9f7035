-- Retention the owner chooses (issue 28, docs/streams.md "Retention"; mirrors sqlite/migrations/011).
-- A source's policy, `{"events": n, "days": d}` as JSON, NULL for the instance's defaults. Events keep
-- their primary key (emitter_id, channel, id_ms, id_seq) of migration 004: a window is still its
-- channel's rows in ID order, but a commit no longer trims it; the background pruner
-- (domain/events/pruner.ts) deletes the oldest in small batches.
ALTER TABLE sources ADD COLUMN retention_json TEXT;
