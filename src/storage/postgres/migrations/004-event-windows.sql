-- Each emitter channel's window of its newest events (mirrors sqlite/migrations/004, which keeps a
-- window as numbered slots tracked in the writer's memory). Here several nodes may write one window, so
-- nothing about it lives in memory: a window is the channel's rows in event-ID order, and each insert
-- trims what falls beyond the newest `keep` in the same statement (events.ts). The insertion counter
-- `n` orders nothing any more.
ALTER TABLE events DROP COLUMN n;
DROP INDEX IF EXISTS events_channel;
ALTER TABLE events DROP CONSTRAINT events_emitter_id_id_ms_id_seq_key;
ALTER TABLE events ADD PRIMARY KEY (emitter_id, channel, id_ms, id_seq);
