-- Each node's heartbeat says how many source leases it holds, so that every node knows the others'
-- share when it gives a source to the node its hits arrive at (domain/cluster/placement.ts).
ALTER TABLE nodes ADD COLUMN held INTEGER NOT NULL DEFAULT 0;
