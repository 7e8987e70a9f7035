-- Accounts, API keys, webhooks, subscriptions and usage counters (mirrors sqlite/migrations/001).
-- Times: `*_at` are epoch seconds, `*_ms` epoch milliseconds, both BIGINT. JSON stays TEXT, as sent,
-- so that key order and number spelling come back exactly as they were stored.
CREATE TABLE users (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  username TEXT NOT NULL UNIQUE,
  email TEXT NOT NULL,
  plan TEXT NOT NULL CHECK (plan IN ('free', 'paid')),
  is_admin BOOLEAN NOT NULL DEFAULT false,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);

CREATE TABLE orgs (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  orgname TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  email TEXT NOT NULL,
  owner_id TEXT NOT NULL REFERENCES users(id),
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);

CREATE TABLE org_members (
  org_id TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
  user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  role TEXT NOT NULL CHECK (role IN ('owner', 'member')),
  created_at BIGINT NOT NULL,
  PRIMARY KEY (org_id, user_id)
);
CREATE INDEX org_members_user ON org_members(user_id);

CREATE TABLE api_keys (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  name TEXT NOT NULL,
  prefix TEXT NOT NULL,
  hash TEXT NOT NULL UNIQUE,
  created_at BIGINT NOT NULL,
  revoked_at BIGINT
);
CREATE INDEX api_keys_user ON api_keys(user_id);

CREATE TABLE webhooks (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  owner_id TEXT NOT NULL,
  created_by TEXT NOT NULL,
  name TEXT,
  description TEXT,
  url TEXT NOT NULL,
  active BOOLEAN NOT NULL,
  signing_secret_sealed TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);
CREATE INDEX webhooks_owner ON webhooks(owner_id, seq);

CREATE TABLE subscriptions (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  owner_id TEXT NOT NULL,
  emitter_id TEXT NOT NULL,
  listener_id TEXT NOT NULL,
  event_name TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  UNIQUE (owner_id, emitter_id, listener_id, event_name)
);
CREATE INDEX subscriptions_emitter ON subscriptions(emitter_id);
CREATE INDEX subscriptions_listener ON subscriptions(listener_id);

CREATE TABLE auto_subscriptions (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  owner_id TEXT NOT NULL,
  listener_id TEXT NOT NULL,
  event_name TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  UNIQUE (owner_id, listener_id, event_name)
);

CREATE TABLE usage_daily (
  user_id TEXT NOT NULL,
  day TEXT NOT NULL,
  invocations BIGINT NOT NULL DEFAULT 0,
  compute_ms BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (user_id, day)
);
