-- Migration 015 of the SQLite driver gives its claims the index this driver's migration 007 made
-- (unclaimed due deliveries). Nothing changes here; the number is kept so that a version means the same
-- point in both drivers.
SELECT 1;
