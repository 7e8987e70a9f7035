-- Migration 006 of the PostgreSQL driver adds what several nodes on one database share (node heartbeats,
-- source run leases). A SQLite store has exactly one node (the data dir lock), so it needs none of it;
-- the number is kept so that a version means the same point in both drivers.
SELECT 1;
