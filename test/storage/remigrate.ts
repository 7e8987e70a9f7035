/**
 * A migration's test on a store that had not run it: a store of the driver is made at the newest schema
 * (`seed` writes through it first), taken back by `back` (SQL that undoes what the migration did and
 * writes rows as the older schema held them), the migration's version forgotten, and the store opened
 * again, which runs the migration alone; `after` then writes as a node of the older version still running
 * beside it would (a rolling upgrade), and `check` reads the migrated store.
 */
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { DatabaseSync } from "node:sqlite";
import pg from "pg";
import type { Storage } from "../../src/storage/port.ts";
import { openPostgresStorage } from "../../src/storage/postgres/driver.ts";
import { openSqliteStorage } from "../../src/storage/sqlite/driver.ts";
import { dropSchema, freshSchema, testPgUrl } from "../pg-schemas.ts";

/** How a migration's test takes a store back to before it. */
export interface Remigration {
  /** The migration's number in the driver's folder. */
  version: number;
  /** Statements run, in order, on the store at the newest schema before the migration runs again. */
  back: string[];
  /** Written through the store before it is taken back. */
  seed?: (store: Storage) => Promise<void>;
  /** Statements run on the migrated store, as an older node beside it writes. */
  after?: string[];
  check: (store: Storage) => Promise<void>;
}

export async function remigrateSqlite(m: Remigration): Promise<void> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  const store = openSqliteStorage({ dataDir });
  await m.seed?.(store);
  await store.close();
  const db = new DatabaseSync(path.join(dataDir, "fount.db"));
  for (const sql of [...m.back, `DELETE FROM schema_migrations WHERE version = ${m.version}`]) db.exec(sql);
  db.close();
  const migrated = openSqliteStorage({ dataDir });
  try {
    if (m.after) {
      const older = new DatabaseSync(path.join(dataDir, "fount.db"));
      for (const sql of m.after) older.exec(sql);
      older.close();
    }
    await m.check(migrated);
  } finally {
    await migrated.close();
  }
}

export async function remigratePostgres(m: Remigration): Promise<void> {
  const schema = freshSchema();
  try {
    const store = await openPostgresStorage({ url: testPgUrl, schema, poolSize: 1 });
    await m.seed?.(store);
    await store.close();
    await runOn(schema, [...m.back, `DELETE FROM schema_migrations WHERE version = ${m.version}`]);
    const migrated = await openPostgresStorage({ url: testPgUrl, schema, poolSize: 1 });
    try {
      if (m.after) await runOn(schema, m.after);
      await m.check(migrated);
    } finally {
      await migrated.close();
    }
  } finally {
    await dropSchema(schema);
  }
}

async function runOn(schema: string, statements: string[]): Promise<void> {
  const client = new pg.Client({ connectionString: testPgUrl });
  await client.connect();
  try {
    await client.query(`SET search_path TO "${schema}"`);
    for (const sql of statements) await client.query(sql);
  } finally {
    await client.end();
  }
}
