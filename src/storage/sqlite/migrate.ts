import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import type { DatabaseSync } from "node:sqlite";
import { migrationFiles, refuseNewerSchema } from "../schema-version.ts";
import { inWriteTransaction } from "./sql.ts";

const migrationsDir = path.join(import.meta.dirname, "migrations");

/** Applies the numbered `NNN-name.sql` files not yet recorded, each in its own transaction. */
export function migrate(db: DatabaseSync): number[] {
  db.exec(
    "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)",
  );
  const applied = new Set(
    (db.prepare("SELECT version FROM schema_migrations").all() as Array<{ version: number }>).map(
      (r) => r.version,
    ),
  );
  const files = migrationFiles(readdirSync(migrationsDir));
  refuseNewerSchema(
    "SQLite",
    applied,
    files.map((f) => f.version),
  );
  const done: number[] = [];
  for (const { version, file } of files) {
    if (applied.has(version)) continue;
    const sql = readFileSync(path.join(migrationsDir, file), "utf8");
    try {
      inWriteTransaction(db, () => {
        db.exec(sql);
        db.prepare("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)").run(
          version,
          file,
          Math.floor(Date.now() / 1000),
        );
      });
    } catch (err) {
      throw new Error(`SQLite migration ${file} failed: ${(err as Error).message}`, { cause: err });
    }
    done.push(version);
  }
  return done;
}
