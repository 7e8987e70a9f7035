-- Work that several nodes share (mirrored by postgres/migrations/005, where it matters).
-- A delivery's claim holds until `claimed_until` (epoch ms): a node renews the claims it works on, and
-- another node may take a delivery whose lease ran out (its node died). Rows claimed before this
-- migration have no lease and count as expired.
ALTER TABLE deliveries ADD COLUMN claimed_until INTEGER;
-- Claimed rows are few (what the dispatchers hold in memory): renewals and resets find a node's own,
-- and claims count the live ones of each listener, without walking a listener's backlog.
CREATE INDEX deliveries_claimed ON deliveries(claimed_by, listener_id) WHERE claimed_by IS NOT NULL;

-- Facts about the store itself: `encryption_check` holds a value sealed with the encryption key, so that
-- a node started with another key is refused before it writes anything it could not read back.
CREATE TABLE meta (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL
);

-- API requests per rate-limit key in its current window (the cluster-wide rate limit).
CREATE TABLE rate_limits (
  key TEXT PRIMARY KEY,
  window_start_ms INTEGER NOT NULL,
  count INTEGER NOT NULL
);
