-- Every delivery attempt, inspectable (docs/delivery.md, "Attempts"), and replays (mirrors
-- postgres/migrations/012). An attempt records what it sent and what came back: the URL, the request
-- headers (the signature, never the secret), the answer's headers and the first 64 KB of its body (the
-- `response` column, which kept 512 bytes before), and what kind of error ended it. The body sent is the
-- delivery's own copy of the event (`deliveries.event_json`), the same on every attempt, so it is not
-- stored again per attempt.
ALTER TABLE delivery_attempts ADD COLUMN url TEXT;
ALTER TABLE delivery_attempts ADD COLUMN request_headers TEXT;       -- JSON object
ALTER TABLE delivery_attempts ADD COLUMN response_headers TEXT;      -- JSON object
ALTER TABLE delivery_attempts ADD COLUMN response_truncated INTEGER;
ALTER TABLE delivery_attempts ADD COLUMN error_kind TEXT;            -- dns, tls, timeout, refused, …

-- A replayed delivery: made by `POST /v1/sources/{id}/events/…/replay` rather than by routing.
-- `replay_id` names the request (also its `subscription_id`), `replayed_from` the newest earlier delivery
-- of the same event to the same listener, if one was kept.
ALTER TABLE deliveries ADD COLUMN replay_id TEXT;
ALTER TABLE deliveries ADD COLUMN replayed_from TEXT;

-- An event's deliveries (`GET /v1/sources/{id}/events/{event_id}/deliveries`, and replays).
CREATE INDEX deliveries_event ON deliveries(emitter_id, event_id);
