-- The event search (docs/streams.md, "Searching events"): a full-text index of each stored event's JSON,
-- as an FTS5 table whose content is the events table itself (external content: the text is not stored
-- twice). Its trigram tokenizer makes `q` a case-insensitive substring match, as pg_trgm does on
-- PostgreSQL. Triggers keep it exact whatever writes events: a window's slot overwritten in place (an
-- UPDATE), a new slot (an INSERT), and every deletion (the events routes, pruning, a source's removal).
-- The rowid is the events table's own; VACUUM INTO (fount backup) keeps rowids, so the copy stays exact.
CREATE VIRTUAL TABLE events_text USING fts5(
  event_json,
  content = 'events',
  content_rowid = 'rowid',
  tokenize = 'trigram'
);

CREATE TRIGGER events_text_insert AFTER INSERT ON events BEGIN
  INSERT INTO events_text (rowid, event_json) VALUES (new.rowid, new.event_json);
END;

CREATE TRIGGER events_text_delete AFTER DELETE ON events BEGIN
  INSERT INTO events_text (events_text, rowid, event_json) VALUES ('delete', old.rowid, old.event_json);
END;

CREATE TRIGGER events_text_update AFTER UPDATE OF event_json ON events BEGIN
  INSERT INTO events_text (events_text, rowid, event_json) VALUES ('delete', old.rowid, old.event_json);
  INSERT INTO events_text (rowid, event_json) VALUES (new.rowid, new.event_json);
END;

-- The events stored before this migration.
INSERT INTO events_text (events_text) VALUES ('rebuild');

-- The outcome filter (delivery_status) looks up an event's deliveries by (emitter_id, event_id): the
-- index deliveries_event (migration 012) serves it.
