-- Each emitter channel's window of its newest events as a fixed set of numbered slots. Once a window is
-- full, a new event overwrites the oldest one's row in place: a group commit rewrites the few pages
-- those rows live on, instead of appending pages, freeing the trimmed ones and updating two indexes and
-- the AUTOINCREMENT counter (14 WAL frames per commit of 19 events before, docs/architecture.md).
CREATE TABLE event_slots (
  emitter_id TEXT NOT NULL,
  channel TEXT NOT NULL,
  slot INTEGER NOT NULL,
  id TEXT NOT NULL,
  id_ms INTEGER NOT NULL,
  id_seq INTEGER NOT NULL,
  indexed_at_ms INTEGER NOT NULL,
  event_json TEXT NOT NULL,
  meta_json TEXT NOT NULL
);

-- Slots number a window's events oldest first; rows are copied channel by channel, so that each
-- window's rows start out next to each other.
INSERT INTO event_slots (emitter_id, channel, slot, id, id_ms, id_seq, indexed_at_ms, event_json, meta_json)
SELECT emitter_id, channel,
  row_number() OVER (PARTITION BY emitter_id, channel ORDER BY id_ms, id_seq) - 1,
  id, id_ms, id_seq, indexed_at_ms, event_json, meta_json
FROM events
ORDER BY emitter_id, channel, id_ms, id_seq;

DROP TABLE events;
ALTER TABLE event_slots RENAME TO events;
CREATE UNIQUE INDEX events_window ON events(emitter_id, channel, slot);
