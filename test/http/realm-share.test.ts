/**
 * An owner with more busy sources than its realm budget (FOUNT_EXECUTOR_REALMS_PER_OWNER) shares
 * realms instead of stopping and starting them: with a budget of 2, six sources hit in rounds all
 * answer, each keeps its own db and order, and the owner's process starts no realm after the first
 * round. When a shared realm dies, the source that caused it gets the specific code and a sharer
 * caught mid-run gets `executor_crash`. After a pause, sources past the owner's 16 cached dbs take the
 * realms their evictions vacated instead of starting workers.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { ExecutorPool } from "../../src/runtime/executor-pool.ts";
import { deploy, emitted, events, fixture, hit } from "../fixtures/components/fixtures.ts";
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

test("a shared realm that dies blames its culprit; a sharer caught mid-run gets executor_crash", async () => {
  const solo = await startServer({ executorRealmsPerOwner: 1 });
  try {
    const owner = await solo.createUser("realm-sharer-blame");
    const slow = await deploy(solo, { component_code: fixture("slow-run.mjs") }, owner.key);
    const exit = await deploy(solo, { component_code: fixture("hostile/process-exit.mjs") }, owner.key);
    const pool = solo.built.services.executor as ExecutorPool;
    const slowUrl = slow.configured_props.http.endpoint_url;
    const waiting = hit(`${slowUrl}?ms=60000`, { method: "POST" });
    const end = Date.now() + 60_000;
    while (!pool.stats().some((o) => o.ownerId === owner.id && o.inCode > 0)) {
      assert.ok(Date.now() < end, "the slow source never entered its code");
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal((await hit(exit.configured_props.http.endpoint_url, { method: "POST" })).status, 500);
    assert.equal((await waiting).status, 500);
    const codes = async (id: string) =>
      (await events(solo, id, "$errors", owner.key)).map((e) => e.event.error.code as string);
    assert.deepEqual(await codes(exit.id), ["process_exit"]);
    assert.deepEqual(await codes(slow.id), ["executor_crash"]);
    // Both go on in a fresh realm.
    assert.equal((await hit(`${slowUrl}?ms=1`, { method: "POST" })).status, 200);
  } finally {
    await solo.close();
  }
});

test("after a pause, a source past the owner's 16 cached dbs takes the realm its eviction vacated", async () => {
  // The default budget: a realm per source. The pool keeps the db (and realm) of 16 sources per owner,
  // so the 17th and 18th evict the least recently used, whose realms they take.
  const own = await startServer();
  try {
    const owner = await own.createUser("realm-pause");
    const many: string[] = [];
    for (let i = 0; i < 18; i++) {
      const s = await deploy(
        own,
        { component_code: fixture("http-echo.mjs"), name: `pause-${i}` },
        owner.key,
      );
      many.push(s.configured_props.http.endpoint_url);
    }
    const started = () =>
      (own.built.services.executor as ExecutorPool).stats().find((o) => o.ownerId === owner.id)
        ?.realmsStarted ?? 0;
    const round = async () => {
      for (const url of many) assert.equal((await hit(url, { method: "POST" })).status, 200);
    };
    await round();
    const before = started();
    // Longer than a vacant realm is kept after its last batch (5 s), shorter than the spare's 10 s.
    await new Promise((r) => setTimeout(r, 6_000));
    await round();
    assert.equal(started(), before, "no realm was started after the pause");
  } finally {
    await own.close();
  }
});
