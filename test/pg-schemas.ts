/**
 * Fresh PostgreSQL schemas for tests, on the machine's local server (FOUNT_TEST_PG_URL, default
 * postgres://postgres@127.0.0.1:5432/test): each store a test opens gets its own schema with a unique
 * name, dropped with everything in it when the store is closed.
 */
import pg from "pg";
import type { Storage } from "../src/storage/port.ts";
import { openPostgresStorage } from "../src/storage/postgres/driver.ts";

export const testPgUrl = process.env.FOUNT_TEST_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test";

let counter = 0;

/** A schema name no other test run uses. */
export function freshSchema(prefix = "fount_test"): string {
  return `${prefix}_${process.pid}_${Date.now().toString(36)}_${++counter}`;
}

/**
 * The `DATABASE_URL` of a Fount process whose store is `schema` (its `search_path`; a start creates the
 * schema when it is missing).
 */
export function schemaUrl(schema: string): string {
  const url = new URL(testPgUrl);
  url.searchParams.set("options", `-c search_path=${schema}`);
  return url.toString();
}

/** Drops a test schema and everything in it. */
export async function dropSchema(name: string): Promise<void> {
  const client = new pg.Client({ connectionString: testPgUrl });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${name}" CASCADE`);
  } finally {
    await client.end();
  }
}

/**
 * A migrated store in a schema, which its `close` drops. Without `schema` it is a fresh one; with it (a
 * restarted server's store), it is that schema as an earlier store left it, and closing keeps it: the
 * caller drops it when done.
 */
export async function openTestPostgres(schema?: string): Promise<Storage> {
  const name = schema ?? freshSchema();
  const store = await openPostgresStorage({ url: testPgUrl, schema: name, poolSize: 4 });
  if (schema !== undefined) return store;
  let dropped: Promise<void> | undefined;
  const close = store.close;
  store.close = () => {
    dropped ??= close().then(() => dropSchema(name));
    return dropped;
  };
  return store;
}
