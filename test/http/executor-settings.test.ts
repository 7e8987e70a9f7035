/**
 * The executor settings of issue 29 (cheaper tenants) as an operator meets them: FOUNT_EXECUTOR_V8_FLAGS
 * reaches each tenant's executor process, minus the flags this Node's V8 does not know;
 * FOUNT_EXECUTOR_MALLOC_ARENA_MAX reaches the process's environment and not its components';
 * FOUNT_EXECUTOR_REALM_YOUNG_MB caps each realm's young generation; and FOUNT_EXECUTOR_IDLE_S stops an
 * idle tenant's executor, whose next hit starts a new one that carries on with the source's db. Runs on
 * SQLite, or PostgreSQL with FOUNT_TEST_STORE=postgres.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, test } from "node:test";
import type { ExecutorPool } from "../../src/runtime/executor-pool.ts";
import { deploy, emitted, fixture, hit } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
before(async () => {
  server = await startServer(
    {},
    {
      FOUNT_EXECUTOR_V8_FLAGS: "--max-lazy  --no-such-v8-flag",
      FOUNT_EXECUTOR_IDLE_S: "1",
      FOUNT_EXECUTOR_MALLOC_ARENA_MAX: "1",
      FOUNT_EXECUTOR_REALM_YOUNG_MB: "1",
    },
  );
});
after(() => server.close());

function pool(): ExecutorPool {
  return server.built.services.executor as ExecutorPool;
}

test("FOUNT_EXECUTOR_V8_FLAGS reaches the tenant's executor, without the flags this Node lacks", async () => {
  const user = await server.createUser("v8-flags");
  const s = await deploy(server, { component_code: fixture("http-echo.mjs"), name: "flags" }, user.key);
  assert.equal((await hit(s.configured_props.http.endpoint_url, { method: "POST" })).status, 200);
  const pid = pool().pidOf(user.id);
  assert.ok(pid !== undefined, "the tenant has an executor");
  const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
  assert.ok(argv.includes("--max-lazy"), argv.join(" "));
  assert.ok(!argv.includes("--no-such-v8-flag"), "an unknown flag would stop node from starting");
});

// Answers with what a realm sees: its young generation's size and its environment's names.
const heapProbe = `import v8 from "node:v8";
export default {
  name: "Heap probe", version: "0.0.1", props: { http: "$.interface.http" },
  async run() {
    const young = v8.getHeapSpaceStatistics().find((s) => s.space_name === "new_space");
    this.http.respond({ status: 200, body: { youngBytes: young.space_size, env: Object.keys(process.env) } });
  },
};`;

test("FOUNT_EXECUTOR_MALLOC_ARENA_MAX reaches the executor's environment, not its components'; FOUNT_EXECUTOR_REALM_YOUNG_MB caps each realm's young generation", async () => {
  const user = await server.createUser("memory-settings");
  const s = await deploy(server, { component_code: heapProbe, name: "heap" }, user.key);
  const res = await hit(s.configured_props.http.endpoint_url, { method: "POST" });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  const seen = res.body as { youngBytes: number; env: string[] };
  const pid = pool().pidOf(user.id);
  assert.ok(pid !== undefined, "the tenant has an executor");
  const environ = readFileSync(`/proc/${pid}/environ`, "utf8").split("\0");
  assert.ok(environ.includes("MALLOC_ARENA_MAX=1"), environ.join(" "));
  assert.ok(!seen.env.includes("MALLOC_ARENA_MAX"), `the component sees ${seen.env.join(", ")}`);
  // V8's default gives a realm 4 MiB of young generation at its start and lets it grow to 16; capped
  // at 1 MiB it keeps V8's smallest, 2 MiB (two semi-spaces).
  assert.ok(seen.youngBytes <= 2 * 1024 * 1024, `young generation of ${seen.youngBytes} bytes`);
});

test("FOUNT_EXECUTOR_IDLE_S stops an idle executor; the next hit starts one that goes on with the source's db", async () => {
  const user = await server.createUser("idle");
  const s = await deploy(server, { component_code: fixture("http-echo.mjs"), name: "idle" }, user.key);
  const endpoint: string = s.configured_props.http.endpoint_url;
  assert.equal((await hit(endpoint, { method: "POST" })).status, 200);
  const first = pool().pidOf(user.id);
  assert.ok(first !== undefined);
  const end = Date.now() + 60_000;
  while (pool().pidOf(user.id) !== undefined) {
    assert.ok(Date.now() < end, "the idle executor was not stopped");
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal((await hit(endpoint, { method: "POST" })).status, 200);
  assert.notEqual(pool().pidOf(user.id), first, "a new executor process");
  const counts = (await emitted(server, s.id, user.key)).map((e) => e.count).sort();
  assert.deepEqual(counts, [1, 2], "the second hit saw the first one's db");
});
