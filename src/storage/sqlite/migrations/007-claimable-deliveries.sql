-- Migration 007 of the PostgreSQL driver indexes the unclaimed due deliveries for its claim statement.
-- SQLite's claims walk the due index in process, where the rows in flight cost little; the number is
-- kept so that a version means the same point in both drivers.
SELECT 1;
