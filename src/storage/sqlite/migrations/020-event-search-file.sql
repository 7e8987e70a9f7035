-- The event search's FTS5 index moves out of this file into a file of its own beside it
-- (`fount-search.db`), written by a worker thread with its own connection (search-indexer.ts), so that
-- indexing never holds this file's write lock or the server's event loop: at a million events an
-- indexing batch with its FTS5 merge held both for up to tens of milliseconds, and every emit waited.
--
-- What changes here: the queue keeps a change count per rowid instead of the text the index held. The
-- worker reads the queued rowids with their rows' current text on a connection of its own, indexes them
-- in its file (whose FTS5 table keeps its own copy of the text, so it removes a rowid's old entry
-- without being told that text), and the server then removes each queued rowid whose change count is
-- still the one the worker read; a rowid changed in between stays queued and is indexed again.
DROP TRIGGER events_text_insert;
DROP TRIGGER events_text_delete;
DROP TRIGGER events_text_update;
DROP TABLE events_text;
DROP TABLE events_text_queue;

CREATE TABLE events_text_queue (
  event_rowid INTEGER PRIMARY KEY,
  changes INTEGER NOT NULL DEFAULT 0
);

CREATE TRIGGER events_text_insert AFTER INSERT ON events BEGIN
  INSERT INTO events_text_queue (event_rowid) VALUES (new.rowid)
    ON CONFLICT (event_rowid) DO UPDATE SET changes = changes + 1;
END;

CREATE TRIGGER events_text_delete AFTER DELETE ON events BEGIN
  INSERT INTO events_text_queue (event_rowid) VALUES (old.rowid)
    ON CONFLICT (event_rowid) DO UPDATE SET changes = changes + 1;
END;

CREATE TRIGGER events_text_update AFTER UPDATE OF event_json ON events BEGIN
  INSERT INTO events_text_queue (event_rowid) VALUES (new.rowid)
    ON CONFLICT (event_rowid) DO UPDATE SET changes = changes + 1;
END;

-- Which index file belongs to this store: a random token written here and in the index file when the
-- index is made. A file with another token (or none) is another store's or a stale copy's: it is
-- replaced and every event queued again (a restored backup, a copied data dir).
CREATE TABLE search_index (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  token TEXT NOT NULL
);

-- The stored events are queued for the new file when the store opens (search-indexer.ts): the store has
-- no token yet, so its index file is made anew and every event queued then.
