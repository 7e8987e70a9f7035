-- `where` finds its candidates through the trigram index `events_text`, by its value as a word or, for a
-- shorter value, by the path's last key and the value side by side (`"id":42`), and checks them with
-- JSONB containment, as SQLite's search does (postgres/event-search.ts; docs/architecture.md, "Fewer index
-- entries per kept event"). The jsonb_path_ops GIN index that served it cost every event a window keeps
-- about 7 µs of PostgreSQL's CPU (its JSON parsed and about 20 entries written) and 60 bytes;
-- `event_jsonb` stays, for the check.
DROP INDEX IF EXISTS events_json;
