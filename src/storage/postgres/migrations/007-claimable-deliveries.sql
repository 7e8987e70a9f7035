-- Claims walked the due index from its head, where the deliveries in flight sit (pending and claimed, up
-- to a few hundred per node), and locked every row they looked at: 4 to 9 ms a claim at 700
-- deliveries/s on the 2-core machine. Unclaimed due rows get an index of their own, and the leases of
-- claimed rows one, so that a claim finds a dead node's rows without walking the live ones.
CREATE INDEX deliveries_claimable ON deliveries(next_attempt_ms, seq) WHERE status = 'pending' AND claimed_by IS NULL;
CREATE INDEX deliveries_claim_lease ON deliveries(claimed_until) WHERE claimed_by IS NOT NULL;
