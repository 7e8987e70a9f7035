/**
 * Several nodes on one PostgreSQL schema, as a cluster runs them: they start at once on an empty store
 * (exactly one admin), and count API rate limits together.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, test } from "node:test";
import { startServer, type TestServer } from "../helpers.ts";
import { dropSchema, freshSchema, openTestPostgres } from "../pg-schemas.ts";

// Nodes of one cluster share the encryption key (each test server has a data dir, and key file, of its own).
process.env.FOUNT_ENCRYPTION_KEY = randomBytes(32).toString("base64");

const schemas: string[] = [];
after(() => Promise.all(schemas.map(dropSchema)));

/** `n` servers started at once on one fresh schema, each its own node. */
async function startNodes(n: number, env: NodeJS.ProcessEnv = {}): Promise<TestServer[]> {
  const schema = freshSchema();
  schemas.push(schema);
  // Connected (and migrated) first, so that the starts meet at the first admin's creation.
  const stores = await Promise.all(Array.from({ length: n }, () => openTestPostgres(schema)));
  const started = await Promise.allSettled(
    stores.map((store, i) => startServer({}, { FOUNT_NODE_ID: `node-${i}`, ...env }, { store })),
  );
  const up = started.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
  after(() => Promise.all(up.map((s) => s.close())));
  for (const r of started) if (r.status === "rejected") throw r.reason;
  return up;
}

test("nodes starting at once on an empty store all come up, and exactly one creates the admin", async () => {
  const nodes = await startNodes(4);
  const created = nodes.filter((n) => n.built.bootstrap !== undefined);
  assert.equal(created.length, 1, "one node made the admin and shows its key");
  assert.equal(await nodes[0]!.built.services.store.countUsers(), 1);
  for (const node of nodes) {
    const me = await node.api("GET", "/v1/users/me");
    assert.equal(me.status, 200, me.text);
    assert.equal(me.body.data.username, "admin");
  }
});
