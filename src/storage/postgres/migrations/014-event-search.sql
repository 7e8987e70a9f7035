-- The event search (docs/streams.md, "Searching events"; mirrors sqlite/migrations/014). `q` is a
-- case-insensitive substring match on each event's stored JSON text, served by a pg_trgm GIN index
-- (ILIKE '%…%'); `where` is JSONB containment, served by a jsonb_path_ops GIN index on the parsed JSON.
-- Both are indexes on the events table, so every write and deletion keeps them exact.
--
-- pg_trgm ships with PostgreSQL (contrib) and is a trusted extension: a database owner may create it.
-- It goes to the public schema when there is one, so that a Fount schema dropped with CASCADE (a test's)
-- does not take it, and the indexes of other schemas, along; its operator class is named with its schema,
-- since the store's search_path may hold only its own schema.
DO $$
DECLARE
  ext_schema TEXT;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
    BEGIN
      CREATE EXTENSION pg_trgm SCHEMA public;
    EXCEPTION WHEN OTHERS THEN
      CREATE EXTENSION pg_trgm;
    END;
  END IF;
  SELECT n.nspname INTO ext_schema
    FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
    WHERE e.extname = 'pg_trgm';
  EXECUTE format('CREATE INDEX events_text ON events USING gin (event_json %I.gin_trgm_ops)', ext_schema);
END
$$;

-- The event as JSONB for `where`. PostgreSQL's jsonb refuses two things an event's JSON text may hold: the
-- escape \u0000 (U+0000 in a string) and an unpaired surrogate (\ud800): a plain cast in the index would
-- make storing such an event fail. Those events are NULL here (found by q, not by where); an escape whose
-- backslash is itself escaped (`\\u0000`, the text "\u0000") is not one.
CREATE FUNCTION event_jsonb(event_json TEXT) RETURNS JSONB
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN CASE
    WHEN event_json ~ '(^|[^\\])(\\\\)*\\u(0000|[dD][89a-fA-F][0-9a-fA-F]{2})' THEN NULL
    ELSE event_json::jsonb
  END;

CREATE INDEX events_json ON events USING gin (event_jsonb(event_json) jsonb_path_ops);
