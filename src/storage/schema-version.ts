/** The check both drivers make before migrating: a store written by a newer Fount is never touched. */

/** Thrown when a store cannot be opened; `code` says why, the message is one line for the operator. */
export class StoreOpenError extends Error {
  readonly code: "store_unreachable" | "store_too_new" | "no_store";

  constructor(code: StoreOpenError["code"], message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "StoreOpenError";
    this.code = code;
  }
}

/**
 * Refuses a store whose recorded migrations include a version this build does not have: it was written
 * by a newer Fount, and this one would misread it (or migrate it wrongly).
 */
export function refuseNewerSchema(
  driver: "SQLite" | "PostgreSQL",
  applied: Iterable<number>,
  known: Iterable<number>,
): void {
  const knownSet = new Set(known);
  const unknown = [...applied].filter((v) => !knownSet.has(v)).sort((a, b) => a - b);
  if (unknown.length === 0) return;
  const newest = Math.max(0, ...knownSet);
  throw new StoreOpenError(
    "store_too_new",
    `the ${driver} store was written by a newer Fount (schema version ${unknown.at(-1)}; this build knows up to ${newest}): upgrade Fount, or point it at another store`,
  );
}

/** The numbered `NNN-name.sql` files of a migrations folder, in order. */
export function migrationFiles(files: string[]): Array<{ version: number; file: string }> {
  return files
    .filter((f) => /^\d+-.*\.sql$/.test(f))
    .sort()
    .map((file) => ({ version: Number.parseInt(file, 10), file }));
}
