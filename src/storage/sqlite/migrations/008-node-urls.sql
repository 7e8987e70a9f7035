-- Migration 008 of the PostgreSQL driver records where nodes reach each other, to forward source
-- endpoint hits. A SQLite store has exactly one node; the number is kept so that a version means the
-- same point in both drivers.
SELECT 1;
