-- Console sessions (docs/console.md, "Sessions"; mirrors sqlite/migrations/010): a sign-in is a row of
-- its user here, named by the sealed cookie, instead of an extra API key. Every node finds it, and a
-- session ended through one node is ended for all.
CREATE TABLE sessions (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  created_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  address TEXT,
  user_agent TEXT
);
CREATE INDEX sessions_user ON sessions(user_id, seq);
CREATE INDEX sessions_expiry ON sessions(expires_at);

-- The "console session" API keys that sign-ins made before this are revoked.
UPDATE api_keys SET revoked_at = extract(epoch FROM now())::bigint
  WHERE name = 'console session' AND revoked_at IS NULL;
