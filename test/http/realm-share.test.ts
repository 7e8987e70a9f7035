/**
 * An owner with more busy sources than its realm budget (FOUNT_EXECUTOR_REALMS_PER_OWNER) shares
 * realms instead of stopping and starting them: with a budget of 2, six sources hit in rounds all
 * answer, each keeps its own db and order, and the owner's process starts no realm after the first
 * round.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { ExecutorPool } from "../../src/runtime/executor-pool.ts";
import { deploy, emitted, fixture, hit } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

const SOURCES = 6;
const ROUNDS = 5;

let server: TestServer;
let user: { id: string; key: string };
const endpoints: Array<{ id: string; url: string }> = [];

before(async () => {
  server = await startServer({ executorRealmsPerOwner: 2 });
  user = await server.createUser("realm-sharer");
  for (let i = 0; i < SOURCES; i++) {
    const s = await deploy(server, { component_code: fixture("http-echo.mjs"), name: `echo-${i}` }, user.key);
    endpoints.push({ id: s.id, url: s.configured_props.http.endpoint_url });
  }
});
after(() => server.close());

function realmsStarted(): number {
  const pool = server.built.services.executor as ExecutorPool;
  return pool.stats().find((o) => o.ownerId === user.id)?.realmsStarted ?? 0;
}

test("more busy sources than realms: every call succeeds, sources share realms without churn", async () => {
  const round = async (r: number) => {
    const answers = await Promise.all(endpoints.map((e) => hit(`${e.url}?round=${r}`, { method: "POST" })));
    for (const a of answers) assert.equal(a.status, 200, a.text);
  };
  await round(0);
  const afterFirst = realmsStarted();
  // Two source realms, the spare started after each, and at most one for the deploys' inspections.
  assert.ok(afterFirst > 0 && afterFirst <= 2 + 3, `realms started in the first round: ${afterFirst}`);
  for (let r = 1; r < ROUNDS; r++) await round(r);
  assert.equal(realmsStarted(), afterFirst, "no realm was started once the budget was reached");
  // Each source kept its own db and order while sharing a realm.
  for (const e of endpoints) {
    const counts = (await emitted(server, e.id, user.key)).map((ev) => ev.count);
    assert.deepEqual(
      counts,
      Array.from({ length: ROUNDS }, (_, i) => i + 1),
    );
  }
});
