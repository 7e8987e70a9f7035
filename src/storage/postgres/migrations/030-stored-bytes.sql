-- The free plan's third daily quota (FOUNT_FREE_DAILY_STORED_BYTES): the JSON a user's runs and workflows
-- stored that day, events and their delivery copies (domain/sources/stored-bytes.ts). Rows of earlier days
-- count nothing stored: the quota only ever reads today's row.
ALTER TABLE usage_daily ADD COLUMN stored_bytes BIGINT NOT NULL DEFAULT 0;
