-- Events of small windows enter the event search's indexes a moment after their commit, not in it
-- (docs/architecture.md, "The PostgreSQL driver", *Search indexes a moment later*). The pg_trgm GIN index of
-- migration 014 was most of PostgreSQL's CPU per stored event (about 35 of 60 µs), and at a high rate a
-- window of 100 drops most of its events within a second: those never need an index entry. A row stored
-- by a small window's commit has `searchable` false; the event search reads such rows through the small
-- partial index `events_unsearched`, so an event is found at once, as before; the search indexer
-- (domain/events/search-indexer.ts) sets `searchable` on the survivors in the background, which puts them
-- in the GIN indexes. Every other row (larger windows, and every row stored before this migration) is
-- searchable when stored.
ALTER TABLE events ADD COLUMN searchable BOOLEAN NOT NULL DEFAULT true;

DO $$
DECLARE
  ext_schema TEXT;
BEGIN
  SELECT n.nspname INTO ext_schema
    FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
    WHERE e.extname = 'pg_trgm';
  DROP INDEX events_text;
  EXECUTE format(
    'CREATE INDEX events_text ON events USING gin (event_json %I.gin_trgm_ops) WHERE searchable', ext_schema);
END
$$;

DROP INDEX events_json;
CREATE INDEX events_json ON events USING gin (event_jsonb(event_json) jsonb_path_ops) WHERE searchable;

CREATE INDEX events_unsearched ON events (emitter_id, channel, id_ms, id_seq) WHERE NOT searchable;
