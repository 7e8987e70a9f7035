/**
 * Applies the numbered migrations under a session advisory lock, so that several nodes starting at once
 * on an empty database take turns: the first applies them, the others find them applied.
 */
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import type { ClientBase } from "pg";
import { migrationFiles, refuseNewerSchema } from "../schema-version.ts";

const migrationsDir = path.join(import.meta.dirname, "migrations");

/**
 * Applies the migrations not yet recorded, each in its own transaction; returns the versions applied.
 * `schema`, when given, is created first (under the same lock) and must be the connection's search path.
 */
export async function migrate(client: ClientBase, schema?: string): Promise<number[]> {
  // A search_path naming a schema that does not exist yet (DATABASE_URL's `options=-c search_path=fount`)
  // means that schema: it is created below, as an explicit `schema` is.
  const current = (await client.query("SELECT current_schema() AS s")).rows[0].s as string | null;
  const target = schema ?? current ?? (await firstSearchPathSchema(client));
  // The advisory lock's key: one per schema, so that stores in different schemas of one database
  // (tests, or two installations) do not wait for each other. Hashed in SQL: the BIGINT hash would
  // lose digits as a JS number.
  const key = `fount.migrate.${target}`;
  await client.query("SELECT pg_advisory_lock(hashtextextended($1, 0))", [key]);
  try {
    // Only when needed: CREATE SCHEMA asks for the CREATE privilege on the database even if it exists.
    if (schema !== undefined || current === null)
      await client.query(`CREATE SCHEMA IF NOT EXISTS ${quoteIdent(target)}`);
    await client.query(
      "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)",
    );
    const applied = new Set(
      (await client.query("SELECT version FROM schema_migrations")).rows.map((r) => r.version as number),
    );
    const files = migrationFiles(readdirSync(migrationsDir));
    refuseNewerSchema(
      "PostgreSQL",
      applied,
      files.map((f) => f.version),
    );
    const done: number[] = [];
    for (const { version, file } of files) {
      if (applied.has(version)) continue;
      const sql = readFileSync(path.join(migrationsDir, file), "utf8");
      await client.query("BEGIN");
      try {
        await client.query(sql);
        await client.query("INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)", [
          version,
          file,
          Math.floor(Date.now() / 1000),
        ]);
        await client.query("COMMIT");
      } catch (err) {
        await client.query("ROLLBACK");
        throw new Error(`PostgreSQL migration ${file} failed: ${(err as Error).message}`, { cause: err });
      }
      done.push(version);
    }
    return done;
  } finally {
    await client.query("SELECT pg_advisory_unlock(hashtextextended($1, 0))", [key]);
  }
}

/** The first schema the search path names (when none of them exists yet). */
async function firstSearchPathSchema(client: ClientBase): Promise<string> {
  const path = (await client.query("SHOW search_path")).rows[0].search_path as string;
  const first = path
    .split(",")
    .map((p) =>
      p
        .trim()
        .replace(/^"(.*)"$/, "$1")
        .replaceAll('""', '"'),
    )
    .find((p) => p !== "" && p !== "$user");
  if (first === undefined) throw new Error("PostgreSQL: the connection's search_path names no schema");
  return first;
}

/** A SQL identifier, quoted. */
export function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}
