-- New events are indexed from a rowid mark instead of a queue entry each: the worker reads every row
-- past `indexed_to` (up to `read_to`) with its text on its own connection, and the server then moves
-- `indexed_to` up to where the worker read (search-indexer.ts). A window of 100,000 appends a row for every
-- event it stores, and queuing each cost an insert here and a delete once indexed, on the server's thread
-- (docs/architecture.md, "The search index in generations").
--
-- Only rows at or below `read_to` are queued, by the triggers: a rewrite in place (a window's slot) and a
-- row given a rowid at or below it again (SQLite gives a new row the rowid past the greatest one left, so
-- a rowid comes back once the rows after it are gone). The worker never reads a row past `read_to`, which
-- the server raises to the greatest rowid before and after each batch: a row the worker read is queued
-- again when its rowid is written afterwards, and a row past `read_to` is read later, with its text then.
CREATE TABLE events_text_mark (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  indexed_to INTEGER NOT NULL,
  read_to INTEGER NOT NULL
);

-- Every row stored so far is indexed or queued.
INSERT INTO events_text_mark (id, indexed_to, read_to)
  SELECT 1, coalesce(max(rowid), 0), coalesce(max(rowid), 0) FROM events;

DROP TRIGGER events_text_insert;
DROP TRIGGER events_text_update;

CREATE TRIGGER events_text_insert AFTER INSERT ON events
  WHEN new.rowid <= (SELECT read_to FROM events_text_mark WHERE id = 1)
BEGIN
  INSERT INTO events_text_queue (event_rowid) VALUES (new.rowid)
    ON CONFLICT (event_rowid) DO UPDATE SET changes = changes + 1;
END;

CREATE TRIGGER events_text_update AFTER UPDATE OF event_json ON events
  WHEN new.rowid <= (SELECT read_to FROM events_text_mark WHERE id = 1)
BEGIN
  INSERT INTO events_text_queue (event_rowid) VALUES (new.rowid)
    ON CONFLICT (event_rowid) DO UPDATE SET changes = changes + 1;
END;
