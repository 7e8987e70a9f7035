/**
 * Several nodes on one PostgreSQL schema, as a cluster runs them: they start at once on an empty store
 * (exactly one admin), and count API rate limits and daily quotas together.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { deploy, fixture, hit } from "../fixtures/components/fixtures.ts";
import { startNodes as startClusterNodes } from "./nodes.ts";

/** `n` servers started at once on one fresh schema, each its own node. */
const startNodes = (n: number, env: NodeJS.ProcessEnv = {}) => startClusterNodes(n, "node", () => ({ env }));

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

test("the API rate limit counts the requests of a key on every node together", async () => {
  const nodes = await startNodes(2, { FOUNT_RATE_LIMIT: "5" });
  const statuses: number[] = [];
  for (let i = 0; i < 8; i++) statuses.push((await nodes[i % 2]!.api("GET", "/v1/users/me")).status);
  // Alone, each node would have let 5 through: 10 in all.
  assert.deepEqual(statuses, [200, 200, 200, 200, 200, 429, 429, 429]);
  const limited = await nodes[1]!.api("GET", "/v1/users/me");
  assert.equal(limited.body.code, "rate_limited", limited.text);
  assert.ok(Number(limited.headers.get("retry-after")) > 0);
  // Requests without a key are counted per address, in a window of their own.
  assert.equal((await nodes[0]!.api("GET", "/v1/users/me", { key: null })).status, 401);
});

test("a free account's daily invocations are counted for all nodes together, also for hits at once", async () => {
  const nodes = await startNodes(2, { FOUNT_FREE_DAILY_INVOCATIONS: "3" });
  const user = await nodes[0]!.createUser("quota-cluster");
  const source = await deploy(nodes[0]!, { component_code: fixture("http-echo.mjs") }, user.key);
  const path = new URL(source.configured_props.http.endpoint_url).pathname;
  const statuses = await Promise.all(
    Array.from({ length: 10 }, (_, i) => hit(`${nodes[i % 2]!.endpoints}${path}`, { method: "POST" })),
  ).then((hits) => hits.map((h) => h.status).sort());
  // Each node alone would have let 3 through: 6 in all.
  assert.deepEqual(statuses, [200, 200, 200, ...Array(7).fill(429)]);
  const me = await nodes[1]!.api("GET", "/v1/users/me", { key: user.key });
  assert.equal(me.body.data.daily_invocations_used, 3);
});
