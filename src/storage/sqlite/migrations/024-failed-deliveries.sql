-- A listener's failed deliveries, for `POST /v1/webhooks/{id}/redeliver`, which requeues them in batches
-- (docs/delivery.md) and the deliveries list's `status=failed`: the listener's index holds every delivery
-- kept for seven days, and a batch found its failed ones by walking all of them. Only failed rows enter
-- this one (a delivery's final failure; a requeue takes it out), so a delivered event never writes it.
CREATE INDEX deliveries_failed ON deliveries(listener_id, seq) WHERE status = 'failed';
