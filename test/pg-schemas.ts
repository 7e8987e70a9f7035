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

/** A migrated, empty store in a fresh schema, which its `close` drops. */
export async function openTestPostgres(): Promise<Storage> {
  const schema = freshSchema();
  const store = await openPostgresStorage({ url: testPgUrl, schema, poolSize: 4 });
  let dropped: Promise<void> | undefined;
  const close = store.close;
  store.close = () => {
    dropped ??= close().then(() => dropSchema(schema));
    return dropped;
  };
  return store;
}
