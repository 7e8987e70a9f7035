-- A listener's parked deliveries: pending with no due time, as an inactive listener's are (docs/delivery.md,
-- *Inactive listeners*). Making a listener active finds them here; through the listener's index it walked
-- every delivery kept for seven days, on every `active: true`, even with nothing parked. Only an inactive
-- listener's rows enter it, so a delivered event never writes it.
CREATE INDEX deliveries_parked ON deliveries(listener_id, seq) WHERE status = 'pending' AND next_attempt_ms IS NULL;
