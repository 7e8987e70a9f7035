/**
 * Ten hostile components, each contained: its failure is a clear `$errors` entry, and meanwhile a
 * sibling source of the same owner and a source of another tenant keep answering. The server runs with
 * a 2 s invocation timeout and 64 MB executors so that runaways are stopped quickly.
 */
import assert from "node:assert/strict";
import { existsSync, rmSync } from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import type { ExecutorPool } from "../../src/runtime/executor-pool.ts";
import { deploy, emitted, events, fixture, type Hit, hit } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
let attacker: { id: string; key: string };
let victim: { id: string; key: string };
let sibling: string;
let bystander: string;

/** Access refusals of Node's permission model, or of the OS when a path slips past it. */
const denied = /^(ERR_ACCESS_DENIED|EACCES)$/;

before(async () => {
  server = await startServer({ invocationTimeoutMs: 2000, executorMemoryMb: 64 });
  attacker = await server.createUser("attacker");
  victim = await server.createUser("victim");
  sibling = (
    await deploy(server, { component_code: fixture("http-echo.mjs"), name: "sibling" }, attacker.key)
  ).configured_props.http.endpoint_url;
  bystander = (
    await deploy(server, { component_code: fixture("http-echo.mjs"), name: "bystander" }, victim.key)
  ).configured_props.http.endpoint_url;
  // Both executors are up before the first attack.
  await assertNeighboursAnswer();
});
after(() => server.close());

async function assertNeighboursAnswer(): Promise<void> {
  const [a, b] = await Promise.all([hit(sibling, { method: "POST" }), hit(bystander, { method: "POST" })]);
  assert.equal(a.status, 200, `the same owner's other source answers: ${a.text}`);
  assert.equal(b.status, 200, `another tenant's source answers: ${b.text}`);
}

/** Deploys a hostile fixture as the attacker. */
async function hostile(file: string): Promise<{ id: string; endpoint: string }> {
  const s = await deploy(server, { component_code: fixture(`hostile/${file}`) }, attacker.key);
  return { id: s.id, endpoint: s.configured_props.http.endpoint_url };
}

async function errorsOf(sourceId: string): Promise<any[]> {
  return events(server, sourceId, "$errors", attacker.key);
}

/** The single `$errors` entry of a source: its error and the event that caused it. */
async function onlyError(sourceId: string): Promise<{ code: string; message: string; original: any }> {
  const list = await errorsOf(sourceId);
  assert.equal(list.length, 1, JSON.stringify(list.map((e) => e.event.error)));
  const { error, original_event } = list[0].event;
  assert.equal(typeof error.message, "string");
  assert.ok(error.message.length > 0);
  return { code: error.code, message: error.message, original: original_event };
}

test("an infinite loop is stopped at the timeout; another tenant answers meanwhile, the sibling right after", async () => {
  const { id, endpoint } = await hostile("infinite-loop.mjs");
  const started = Date.now();
  const looping = hit(`${endpoint}?attempt=1`, { method: "POST" });
  // Another tenant's executor is another process: it answers while the loop spins.
  const during = await hit(bystander, { method: "POST" });
  assert.equal(during.status, 200);
  assert.ok(Date.now() - started < 1500, "the other tenant did not wait for the loop");
  const res: Hit = await looping;
  assert.equal(res.status, 500);
  const elapsed = Date.now() - started;
  assert.ok(elapsed >= 1900 && elapsed < 10_000, `stopped after ${elapsed} ms`);
  const error = await onlyError(id);
  assert.equal(error.code, "timeout");
  assert.match(error.message, /2000 ms/);
  assert.deepEqual(error.original.query, { attempt: "1" });
  await assertNeighboursAnswer();
});

test("a sibling invocation queued behind an infinite loop of the same owner is answered after the restart", async () => {
  const { endpoint } = await hostile("infinite-loop.mjs");
  const looping = hit(endpoint, { method: "POST" });
  // The loop spins before the sibling's call reaches the executor. Were the sibling's call read in the
  // same turn as the loop's, it could enter its run first and be caught mid-run by the loop: a victim,
  // which gets executor_crash (docs/isolation.md, Blame and retries).
  const pool = server.built.services.executor as ExecutorPool;
  for (let i = 0; i < 400 && !pool.stats().some((o) => o.ownerId === attacker.id && o.inCode > 0); i++) {
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  const queued = await hit(sibling, { method: "POST" });
  assert.equal(queued.status, 200, queued.text);
  assert.equal((await looping).status, 500);
});

test("a sibling still loading its module when a loop starts spinning runs after the restart", async () => {
  const { id: loopId, endpoint: loop } = await hostile("infinite-loop.mjs");
  const slow = await deploy(server, { component_code: fixture("slow-load.mjs"), name: "slow" }, attacker.key);
  // The first loop replaces the executor, so the new process has loaded neither module.
  assert.equal((await hit(loop, { method: "POST" })).status, 500);
  const pool = server.built.services.executor as ExecutorPool;
  const queued = hit(slow.configured_props.http.endpoint_url, { method: "POST", body: "after the loop" });
  for (let i = 0; i < 400 && !pool.stats().some((o) => o.ownerId === attacker.id && o.running > 0); i++) {
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  // Sent behind the slow source's batch: it loads quickly and spins while the slow module still waits.
  const looping = hit(loop, { method: "POST" });
  const res = await queued;
  assert.equal(res.status, 200, res.text);
  assert.equal((await looping).status, 500);
  assert.deepEqual(
    (await emitted(server, slow.id, attacker.key)).map((e: { body: string }) => e.body),
    ["after the loop"],
  );
  assert.deepEqual(
    (await errorsOf(loopId)).map((e) => e.event.error.code),
    ["timeout", "timeout"],
  );
});

test("a memory bomb is stopped at the executor's memory cap", async () => {
  // A server of its own with a long timeout: on a loaded machine the bomb needs seconds of CPU to reach
  // the cap, and the 2 s timeout of the other tests would win that race (it would end as a timeout).
  const roomy = await startServer({ invocationTimeoutMs: 60_000, executorMemoryMb: 64 });
  try {
    const owner = await roomy.createUser("bomber");
    const bomb = await deploy(roomy, { component_code: fixture("hostile/memory-bomb.mjs") }, owner.key);
    const echo = await deploy(roomy, { component_code: fixture("http-echo.mjs"), name: "sib" }, owner.key);
    const res = await hit(bomb.configured_props.http.endpoint_url, { method: "POST" });
    assert.equal(res.status, 500);
    const errors = await events(roomy, bomb.id, "$errors", owner.key);
    assert.deepEqual(
      errors.map((e) => e.event.error.code),
      ["out_of_memory"],
    );
    assert.match(errors[0].event.error.message, /memory/);
    const sib = await hit(echo.configured_props.http.endpoint_url, { method: "POST" });
    assert.equal(sib.status, 200, `the same owner's other source answers: ${sib.text}`);
  } finally {
    await roomy.close();
  }
  await assertNeighboursAnswer();
});

test("reading /etc/passwd or another process's environment is denied", async () => {
  const { id, endpoint } = await hostile("read-passwd.mjs");
  assert.equal((await hit(endpoint, { method: "POST" })).status, 200);
  const [attempts] = await emitted(server, id, attacker.key);
  for (const [file, outcome] of Object.entries(
    attempts as Record<string, { code?: string; read?: number }>,
  )) {
    assert.match(String(outcome.code), denied, `${file}: ${JSON.stringify(outcome)}`);
  }
  // Not caught: the run fails and the error is on $errors with the original event.
  const thrown = await hit(`${endpoint}?throw=1`, { method: "POST" });
  assert.equal(thrown.status, 500);
  const error = await onlyError(id);
  assert.match(error.code, denied);
  assert.deepEqual(error.original.query, { throw: "1" });
  assert.equal(JSON.stringify(await events(server, id, undefined, attacker.key)).includes("root:"), false);
  await assertNeighboursAnswer();
});

test("the environment holds only PD_COMPONENT", async () => {
  const { id, endpoint } = await hostile("read-env.mjs");
  assert.equal((await hit(endpoint, { method: "POST" })).status, 200);
  const [seen] = await emitted(server, id, attacker.key);
  assert.deepEqual(seen.env, { PD_COMPONENT: id });
  assert.deepEqual(seen.keys, ["PD_COMPONENT"]);
  assert.notEqual(seen.pid, process.pid, "the component does not run in the server's process");
  assert.deepEqual(await errorsOf(id), []);
  await assertNeighboursAnswer();
});

test("process.exit() fails only its own invocation", async () => {
  const { id, endpoint } = await hostile("process-exit.mjs");
  assert.equal((await hit(endpoint, { method: "POST" })).status, 500);
  const error = await onlyError(id);
  assert.equal(error.code, "process_exit");
  assert.match(error.message, /exit/);
  await assertNeighboursAnswer();
});

test("a component that stops its own process (SIGSTOP) has it replaced; its owner's other sources answer", async () => {
  const { id, endpoint } = await hostile("self-stop.mjs");
  // A stopped process answers nothing, not even the request to stop a realm: only the pool can end it.
  assert.equal((await hit(endpoint, { method: "POST" })).status, 500);
  const error = await onlyError(id);
  assert.equal(error.code, "executor_crash");
  assert.match(error.message, /stopped by a signal/);
  await assertNeighboursAnswer();
});

test("spawning a process is denied", async () => {
  const marker = "/tmp/fount-hostile-spawned";
  rmSync(marker, { force: true });
  const { id, endpoint } = await hostile("spawn.mjs");
  assert.equal((await hit(endpoint, { method: "POST" })).status, 200);
  const [seen] = await emitted(server, id, attacker.key);
  assert.equal(seen.spawned, false);
  assert.match(String(seen.code), denied);
  assert.equal((await hit(`${endpoint}?throw=1`, { method: "POST" })).status, 500);
  assert.match((await onlyError(id)).code, denied);
  assert.equal(existsSync(marker), false, "no command ran");
  await assertNeighboursAnswer();
});

test("an unhandled rejection fails the invocation that left it", async () => {
  const { id, endpoint } = await hostile("unhandled-rejection.mjs");
  assert.equal((await hit(endpoint, { method: "POST" })).status, 500);
  const error = await onlyError(id);
  assert.equal(error.code, "unhandled_rejection");
  assert.match(error.message, /nobody handles me/);
  assert.deepEqual(await emitted(server, id, attacker.key), [], "the run's emits were discarded");
  await assertNeighboursAnswer();
});

test("a 10 MB emit is refused on $errors; the run's other emits are kept", async () => {
  const { id, endpoint } = await hostile("huge-emit.mjs");
  assert.equal((await hit(endpoint, { method: "POST" })).status, 200);
  assert.deepEqual(await emitted(server, id, attacker.key), [{ small: true }]);
  const error = await onlyError(id);
  assert.equal(error.code, "emit_too_large");
  assert.match(error.message, /bytes/);
  await assertNeighboursAnswer();
});

test("an emit flood is capped, with a warning on $errors", async () => {
  const { id, endpoint } = await hostile("emit-flood.mjs");
  const res = await hit(endpoint, { method: "POST" });
  assert.equal(res.status, 200);
  const error = await onlyError(id);
  assert.equal(error.code, "too_many_emits");
  assert.match(error.message, /1000/);
  const kept = await server.api("GET", `/v1/sources/${id}/event_summaries?limit=100`, { key: attacker.key });
  assert.equal(kept.body.page_info.total_count, 100, "the newest 100 events are kept");
  // The newest kept event is the last one under the cap.
  assert.deepEqual(kept.body.data[0].event, { i: 999 });
  await assertNeighboursAnswer();
});

test("writing outside the scratch folder is denied; the scratch folder is writable", async () => {
  const { id, endpoint } = await hostile("write-outside.mjs");
  assert.equal((await hit(endpoint, { method: "POST" })).status, 200);
  const [seen] = await emitted(server, id, attacker.key);
  const { scratch, ...outside } = seen;
  assert.equal(scratch, "fine");
  assert.equal(Object.keys(outside).length, 3);
  for (const [file, code] of Object.entries(outside)) assert.match(String(code), denied, file);
  assert.equal(existsSync("/tmp/fount-hostile-write"), false);
  assert.equal(existsSync("/etc/fount-hostile-write"), false);
  assert.equal(existsSync(path.join(server.dataDir, "pwned")), false);
  await assertNeighboursAnswer();
});

test("a component cannot answer another tenant's HTTP request by writing executor messages", async () => {
  const slow = await deploy(server, { component_code: fixture("slow-run.mjs"), name: "slow" }, victim.key);
  const { endpoint } = await hostile("forge-respond.mjs");
  const waiting = hit(`${slow.configured_props.http.endpoint_url}?ms=1500`, { method: "POST" });
  // The victim's call is in its executor, awaiting, when the forger claims every invocation number.
  await new Promise((r) => setTimeout(r, 400));
  await hit(`${endpoint}?upTo=20000`, { method: "POST" });
  const res = await waiting;
  assert.equal(res.status, 200);
  assert.equal(res.text, '{"success":true}', "the victim's own run answered its request");
  assert.deepEqual(
    (await events(server, slow.id, undefined, victim.key)).map((e) => e.event),
    [{ waited: 1500 }],
  );
  await assertNeighboursAnswer();
});
