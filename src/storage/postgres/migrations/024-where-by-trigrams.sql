-- `where` finds its candidates through the trigram index `events_text`, by its value's word, and checks
-- them with JSONB containment, as SQLite's search does (docs/architecture.md, "Fewer index entries per
-- kept event"). The jsonb_path_ops GIN index that served it cost every event a window keeps about 7 µs of
-- PostgreSQL's CPU (its JSON parsed and about 20 entries written) and 100 bytes; `event_jsonb` stays, for
-- the check.
DROP INDEX IF EXISTS events_json;
