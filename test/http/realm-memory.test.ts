/**
 * What an owner's executor keeps alive between calls (issue 15, memory per owner): a realm costs about
 * 10 MB, so neither the spare realm started ahead for the next source's first call nor the idle
 * inspection realm kept for the next deploy stays for long: after 10 s unused both are stopped.
 * Realms are the threads named "realm" in the executor process.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { after, before, test } from "node:test";
import type { ExecutorPool } from "../../src/runtime/executor-pool.ts";
import { deploy, fixture, hit } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
before(async () => {
  server = await startServer({});
});
after(() => server.close());

/** Threads of a process named "realm"; undefined when the process is gone. */
function realmThreads(pid: number): number | undefined {
  try {
    let n = 0;
    for (const task of readdirSync(`/proc/${pid}/task`)) {
      try {
        if (readFileSync(`/proc/${pid}/task/${task}/comm`, "utf8").trim() === "realm") n++;
      } catch {
        // The thread ended meanwhile.
      }
    }
    return n;
  } catch {
    return undefined;
  }
}

test("an unused spare realm and the idle inspection realm are stopped, the source's realm stays and answers at once", async () => {
  const user = await server.createUser("realm-memory");
  const deployedAt = Date.now();
  const s = await deploy(server, { component_code: fixture("realm-probe.mjs"), name: "mem" }, user.key);
  const endpoint: string = s.configured_props.http.endpoint_url;
  assert.equal((await hit(endpoint, { method: "POST" })).status, 200);
  const pool = server.built.services.executor as ExecutorPool;
  const pid = pool.pidOf(user.id);
  assert.ok(pid !== undefined, "the owner has an executor process");
  // Right after the call: the source's realm, the idle inspection realm (kept 60 s) and a spare.
  assert.ok((realmThreads(pid) ?? 0) >= 2, "the source's realm and the inspection realm run");
  // Both go after 10 s unused, the source's realm only after a minute idle: one realm left within
  // 45 s of the deploy (the old runner kept the inspection realm 60 s and the spare for good).
  let count: number | undefined;
  while (Date.now() - deployedAt < 45_000) {
    count = realmThreads(pid);
    if (count === 1) break;
    await new Promise((r) => setTimeout(r, 250));
  }
  assert.equal(count, 1, "the source's realm alone");
  assert.equal(pool.pidOf(user.id), pid, "the same executor process");
  assert.equal((await hit(endpoint, { method: "POST" })).status, 200);
  assert.equal(realmThreads(pid), 1, "the source reused its realm");
});
