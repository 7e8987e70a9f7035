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
  // The advisory lock's key: one per schema, so that stores in different schemas of one database
  // (tests, or two installations) do not wait for each other.
  const { rows } = await client.query("SELECT 'fount.migrate.' || coalesce($1, current_schema()) AS key", [
    schema ?? null,
  ]);
  // Hashed in SQL: the BIGINT hash would lose digits as a JS number.
  const key = rows[0].key as string | null;
  if (key === null) throw new Error("PostgreSQL: the connection's search_path names no existing schema");
  await client.query("SELECT pg_advisory_lock(hashtextextended($1, 0))", [key]);
  try {
    if (schema !== undefined) await client.query(`CREATE SCHEMA IF NOT EXISTS ${quoteIdent(schema)}`);
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

/** A SQL identifier, quoted. */
export function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}
