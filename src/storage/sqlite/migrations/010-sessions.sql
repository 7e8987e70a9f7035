-- Console sessions (docs/console.md, "Sessions"): a sign-in is a row of its user here, named by the
-- sealed cookie, instead of an extra API key. It ends at sign-out, when its user or an admin revokes
-- it, when its user signs in past the cap, or at `expires_at` (a sweep deletes expired rows).
CREATE TABLE sessions (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  -- Where and with what the user signed in, so they can tell their sessions apart in a list.
  address TEXT,
  user_agent TEXT
);
CREATE INDEX sessions_user ON sessions(user_id, seq);
CREATE INDEX sessions_expiry ON sessions(expires_at);

-- Before this, each sign-in made an API key named "console session", sealed into the cookie. Those
-- keys are revoked: their cookies no longer open to a session, and nothing else should hold them.
UPDATE api_keys SET revoked_at = CAST(strftime('%s', 'now') AS INTEGER)
  WHERE name = 'console session' AND revoked_at IS NULL;
