-- A listener source's pending deliveries, for its `$in` channel (docs/streams.md): through the listener's
-- index a read of its few pending rows walked every delivery kept for seven days (700 ms on the event loop
-- for a source with 300,000). Only deliveries to sources enter it, while pending; a webhook's never do.
CREATE INDEX deliveries_waiting ON deliveries(listener_id, seq) WHERE status = 'pending' AND substr(listener_id, 1, 3) = 'dc_';
