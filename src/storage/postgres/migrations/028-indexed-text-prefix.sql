-- Only the first 65,536 characters of an event's JSON text enter the trigram index, as on SQLite
-- (storage/event-search.ts `indexedChars`; docs/streams.md, "Searching events"). The trigrams of an event
-- of 1 MiB of random words cost PostgreSQL 0.7 to 1.1 s in the commit that stored it (95 to 145 ms
-- without the index, 120 to 330 ms with this one), and every tenant's writes wait for that commit. The
-- search matches `left(event_json, 65536)`, the indexed expression.
DO $$
DECLARE
  ext_schema TEXT;
BEGIN
  SELECT n.nspname INTO ext_schema
    FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
    WHERE e.extname = 'pg_trgm';
  DROP INDEX events_text;
  EXECUTE format(
    'CREATE INDEX events_text ON events USING gin (left(event_json, 65536) %I.gin_trgm_ops) WHERE searchable',
    ext_schema);
END
$$;
