-- Components, sources and what their runs leave behind: db, dedupe state, timers, events, app accounts
-- (mirrors sqlite/migrations/002).
CREATE TABLE components (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  owner_id TEXT NOT NULL,            -- u_…, o_…, or 'registry' for published components
  key TEXT,
  name TEXT NOT NULL,
  version TEXT NOT NULL,
  code TEXT NOT NULL,
  code_hash TEXT NOT NULL,
  component_url TEXT,
  meta_json TEXT NOT NULL,
  dependencies_json TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);
CREATE INDEX components_owner_key ON components(owner_id, key, seq);

CREATE TABLE sources (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  owner_id TEXT NOT NULL,
  created_by TEXT NOT NULL,
  component_id TEXT NOT NULL,
  name TEXT NOT NULL,
  name_slug TEXT NOT NULL,
  active BOOLEAN NOT NULL,
  props_json TEXT NOT NULL,
  endpoint_id TEXT UNIQUE,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  UNIQUE (owner_id, name_slug)
);
CREATE INDEX sources_owner ON sources(owner_id, seq);

CREATE TABLE source_db (
  source_id TEXT PRIMARY KEY,
  data_json TEXT NOT NULL,
  version BIGINT NOT NULL
);

CREATE TABLE dedupe_state (
  source_id TEXT PRIMARY KEY,
  state_json TEXT NOT NULL
);

CREATE TABLE timers (
  source_id TEXT NOT NULL,
  prop_name TEXT NOT NULL,
  interval_seconds BIGINT,
  cron TEXT,
  timezone TEXT,
  next_run_ms BIGINT NOT NULL,
  PRIMARY KEY (source_id, prop_name)
);
CREATE INDEX timers_due ON timers(next_run_ms);

-- Emitted events, $logs and $errors of sources and workflows. `n` orders rows for trimming.
CREATE TABLE events (
  n BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  emitter_id TEXT NOT NULL,
  channel TEXT NOT NULL,
  id TEXT NOT NULL,
  id_ms BIGINT NOT NULL,
  id_seq BIGINT NOT NULL,
  indexed_at_ms BIGINT NOT NULL,
  event_json TEXT NOT NULL,
  meta_json TEXT NOT NULL,
  UNIQUE (emitter_id, id_ms, id_seq)
);
CREATE INDEX events_channel ON events(emitter_id, channel, n);

-- The last event ID handed out per emitter, so IDs keep increasing across restarts and clock steps.
CREATE TABLE emitter_clock (
  emitter_id TEXT PRIMARY KEY,
  last_ms BIGINT NOT NULL,
  last_seq BIGINT NOT NULL
);

CREATE TABLE app_accounts (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  owner_id TEXT NOT NULL,
  app TEXT NOT NULL,
  name TEXT NOT NULL,
  credentials_sealed TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);
CREATE INDEX app_accounts_owner ON app_accounts(owner_id, seq);
