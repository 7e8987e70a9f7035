-- Several nodes on one database (issue 16): which nodes are alive, and which node may run each source.

-- A node writes its heartbeat every second; one silent for longer than a few seconds is taken for dead,
-- and its source leases are free.
CREATE TABLE nodes (
  id TEXT PRIMARY KEY,
  started_ms BIGINT NOT NULL,
  heartbeat_ms BIGINT NOT NULL
);

-- The run lease of a source: the one node that may run its invocations now, so that they run one at a
-- time and in order whichever node received them. `gen` grows with every taking; a commit checks it
-- (fount_assert_lease), so a node that lost the lease while stalled never commits over the new holder.
CREATE TABLE source_leases (
  source_id TEXT PRIMARY KEY,
  node_id TEXT,
  gen BIGINT NOT NULL,
  acquired_ms BIGINT NOT NULL
);

CREATE FUNCTION fount_assert_lease(p_source TEXT, p_node TEXT, p_gen BIGINT) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  -- FOR SHARE keeps the row as checked until this transaction ends: a taking waits for this commit,
  -- so it never lands between the check and the COMMIT.
  PERFORM 1 FROM source_leases WHERE source_id = p_source AND node_id = p_node AND gen = p_gen FOR SHARE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'the run lease of source % was taken by another node', p_source USING ERRCODE = 'FL001';
  END IF;
END $$;
