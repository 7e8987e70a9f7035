-- Guaranteed delivery: the outbox of routed events (one row per event and listener, written in the same
-- transaction as the event), the attempts made on each, and external workflows (`p_…`)
-- (mirrors sqlite/migrations/003).
CREATE TABLE workflows (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  owner_id TEXT NOT NULL,
  created_by TEXT NOT NULL,
  name TEXT NOT NULL,
  url TEXT,
  signing_secret_sealed TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);
CREATE INDEX workflows_owner ON workflows(owner_id, seq);

CREATE TABLE deliveries (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  owner_id TEXT NOT NULL,
  subscription_id TEXT NOT NULL,
  emitter_id TEXT NOT NULL,
  event_id TEXT NOT NULL,
  channel TEXT NOT NULL,
  listener_id TEXT NOT NULL,
  listener_kind TEXT NOT NULL CHECK (listener_kind IN ('webhook', 'source', 'workflow')),
  event_json TEXT NOT NULL,           -- a copy: the emitter's stream keeps only its last 100 events
  meta_json TEXT NOT NULL,
  indexed_at_ms BIGINT NOT NULL,
  hops INTEGER NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
  attempts INTEGER NOT NULL DEFAULT 0,
  round_attempts INTEGER NOT NULL DEFAULT 0,
  next_attempt_ms BIGINT,
  last_status_code INTEGER,
  last_error TEXT,
  last_duration_ms BIGINT,
  claimed_by TEXT,                    -- the dispatcher run attempting it now
  created_ms BIGINT NOT NULL,
  updated_ms BIGINT NOT NULL
);
-- Due work, soonest first.
CREATE INDEX deliveries_due ON deliveries(next_attempt_ms, seq) WHERE status = 'pending';
-- In-order delivery to sources: the oldest pending delivery of a subscription goes first.
CREATE INDEX deliveries_subscription ON deliveries(subscription_id, seq) WHERE status = 'pending';
CREATE INDEX deliveries_listener ON deliveries(listener_id, seq);
CREATE INDEX deliveries_finished ON deliveries(updated_ms) WHERE status <> 'pending';

CREATE TABLE delivery_attempts (
  delivery_id TEXT NOT NULL REFERENCES deliveries(id) ON DELETE CASCADE,
  n INTEGER NOT NULL,
  started_ms BIGINT NOT NULL,
  duration_ms BIGINT NOT NULL,
  status_code INTEGER,
  error TEXT,
  response TEXT,
  outcome TEXT NOT NULL CHECK (outcome IN ('succeeded', 'retry', 'failed')),
  PRIMARY KEY (delivery_id, n)
);
