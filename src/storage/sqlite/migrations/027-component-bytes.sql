-- What each saved component keeps on disk (code, definition and package versions, in bytes), so that an
-- owner's total (FOUNT_MAX_COMPONENT_BYTES_PER_OWNER, docs/operations.md) is one index-only sum, not a read
-- of every record's code at each save; and an index by code hash, to find an identical save of the owner.
ALTER TABLE components ADD COLUMN stored_bytes INTEGER NOT NULL DEFAULT 0;
UPDATE components SET stored_bytes =
  length(CAST(code AS BLOB)) + length(CAST(meta_json AS BLOB)) + length(CAST(dependencies_json AS BLOB));
CREATE INDEX components_owner_bytes ON components(owner_id, stored_bytes);
CREATE INDEX components_owner_hash ON components(owner_id, code_hash);
