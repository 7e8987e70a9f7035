-- The event search's FTS5 index (migration 014) is kept off the commit path: storing, overwriting or
-- deleting an event only records its rowid in `events_text_queue`, and the indexer (search-indexer.ts)
-- brings the index up to date in batches after commit, and before every search, so a search stays exact.
-- Tokenizing each event in the trigger cost about 70 µs of CPU per stored event, twice once a window is
-- full (the overwritten text is deleted from the index too); in batches, a slot overwritten several times
-- between two runs is indexed once, and FTS5 merges fewer, larger segments (docs/architecture.md).
--
-- `indexed_json` is the text the index holds for the rowid, which an external-content FTS5 table needs to
-- delete it: the event's text before its first change since the last run (INSERT OR IGNORE keeps that
-- first one), or NULL when the rowid was not indexed (a new row). The events table's rows are read at
-- indexing time, so the index gets each rowid's latest text, or none when the row is gone.
DROP TRIGGER events_text_insert;
DROP TRIGGER events_text_delete;
DROP TRIGGER events_text_update;

CREATE TABLE events_text_queue (
  event_rowid INTEGER PRIMARY KEY,
  indexed_json TEXT
);

CREATE TRIGGER events_text_insert AFTER INSERT ON events BEGIN
  INSERT OR IGNORE INTO events_text_queue (event_rowid, indexed_json) VALUES (new.rowid, NULL);
END;

CREATE TRIGGER events_text_delete AFTER DELETE ON events BEGIN
  INSERT OR IGNORE INTO events_text_queue (event_rowid, indexed_json) VALUES (old.rowid, old.event_json);
END;

CREATE TRIGGER events_text_update AFTER UPDATE OF event_json ON events BEGIN
  INSERT OR IGNORE INTO events_text_queue (event_rowid, indexed_json) VALUES (new.rowid, old.event_json);
END;
