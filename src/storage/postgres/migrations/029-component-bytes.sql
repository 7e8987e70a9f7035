-- What each saved component keeps on disk (code, definition and package versions, in bytes), so that an
-- owner's total (FOUNT_MAX_COMPONENT_BYTES_PER_OWNER, docs/operations.md) is one index-only sum, not a read
-- of every record's code at each save; and an index by code hash, to find an identical save of the owner
-- (mirrors sqlite/migrations/027).
ALTER TABLE components ADD COLUMN stored_bytes BIGINT NOT NULL DEFAULT 0;
UPDATE components SET stored_bytes = octet_length(code) + octet_length(meta_json) + octet_length(dependencies_json);
CREATE INDEX components_owner_bytes ON components(owner_id, stored_bytes);
CREATE INDEX components_owner_hash ON components(owner_id, code_hash);
