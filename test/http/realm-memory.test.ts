/**
 * What an owner's executor keeps alive between calls (issue 15, memory per owner): a realm costs about
 * 10 MB, so a deploy's source runs in the realm that inspected its component rather than in a second
 * one, and nothing else started ahead stays. Realms are the threads named "realm" in the executor
 * process.
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

test("a deploy leaves one realm, the source's, which stays and answers at once", async () => {
  const user = await server.createUser("realm-memory");
  const s = await deploy(server, { component_code: fixture("realm-probe.mjs"), name: "mem" }, user.key);
  const endpoint: string = s.configured_props.http.endpoint_url;
  assert.equal((await hit(endpoint, { method: "POST" })).status, 200);
  const pool = server.built.services.executor as ExecutorPool;
  const pid = pool.pidOf(user.id);
  assert.ok(pid !== undefined, "the owner has an executor process");
  // The inspection's realm became the source's: no other realm was started for the deploy.
  assert.equal(pool.stats().find((o) => o.ownerId === user.id)?.realmsStarted, 1);
  assert.equal(realmThreads(pid), 1, "the source's realm alone");
  // Past the 10 s after which an unused spare or an idle inspection realm would be stopped.
  await new Promise((r) => setTimeout(r, 11_000));
  assert.equal(pool.pidOf(user.id), pid, "the same executor process");
  assert.equal((await hit(endpoint, { method: "POST" })).status, 200);
  assert.equal(realmThreads(pid), 1, "the source reused its realm");
  assert.equal(pool.stats().find((o) => o.ownerId === user.id)?.realmsStarted, 1);
});
