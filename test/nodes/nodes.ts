/**
 * Servers that are nodes of one cluster, as the tests of test/nodes/ start them: each its own node
 * (`FOUNT_NODE_ID`), all on one fresh PostgreSQL schema, sharing one encryption key (each test server has
 * a data dir, and key file, of its own); closed, and the schema dropped, when the test that started
 * them ends.
 */
import { randomBytes } from "node:crypto";
import { after } from "node:test";
import type { BuildOptions } from "../../src/app.ts";
import type { Config } from "../../src/config.ts";
import { startServer, type TestServer } from "../helpers.ts";
import { dropSchema, freshSchema, openTestPostgres } from "../pg-schemas.ts";

/** What node `i` is started with besides its store and node ID. */
export interface NodeStart {
  overrides?: Partial<Config>;
  env?: NodeJS.ProcessEnv;
  build?: BuildOptions;
}

/**
 * `n` servers started at once on one fresh schema, named `<name>-0`, `<name>-1`, …; their stores are
 * connected (and migrated) first, so that the starts meet at what the first start creates.
 */
export async function startNodes(
  n: number,
  name: string,
  each: (i: number) => NodeStart = () => ({}),
): Promise<TestServer[]> {
  process.env.FOUNT_ENCRYPTION_KEY ??= randomBytes(32).toString("base64");
  const schema = freshSchema();
  const stores = await Promise.all(Array.from({ length: n }, () => openTestPostgres(schema)));
  const started = await Promise.allSettled(
    stores.map((store, i) => {
      const { overrides = {}, env = {}, build = {} } = each(i);
      return startServer(overrides, { FOUNT_NODE_ID: `${name}-${i}`, ...env }, { store, ...build });
    }),
  );
  const up = started.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
  // After the test (or the file) that started them: the servers, then their schema.
  after(async () => {
    await Promise.all(up.map((s) => s.close()));
    await dropSchema(schema);
  });
  for (const r of started) if (r.status === "rejected") throw r.reason;
  return up;
}
