/**
 * Spare executors (FOUNT_EXECUTOR_SPARES, runtime/executors/spares.ts): a tenant's first hit after its
 * executor stopped runs in a process started ahead with no owner, which then reads that owner's code
 * and nothing of anyone else's. As root the spare runs under a uid of its own that becomes the owner's,
 * and the kernel refuses what the permission model refuses; not root, the permission model alone does.
 * Runs on SQLite only (README, Tests): nothing here goes through the store.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { ownerFolderName } from "../../src/runtime/bundle-layout.ts";
import type { ExecutorPool } from "../../src/runtime/executor-pool.ts";
import { deploy, emitted, hit } from "../fixtures/components/fixtures.ts";
import { asUid, startServer, type TestServer } from "../helpers.ts";

const isRoot = process.getuid?.() === 0;
/** Refusals of Node's permission model, or of the kernel when a path slips past it. */
const denied = /^(ERR_ACCESS_DENIED|EACCES|ERR_MODULE_NOT_FOUND)$/;

/** Emits who runs it and where, after writing a marker to its scratch folder and reading it back. */
const whoCode = `
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import ms from "ms";
export default {
  name: "Who",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  run(event) {
    const file = path.join(os.tmpdir(), "marker.txt");
    fs.writeFileSync(file, String(event.body?.marker ?? "none"));
    this.$emit({ uid: process.getuid(), pid: process.pid, tmp: os.tmpdir(), back: fs.readFileSync(file, "utf8"), hour: ms("1h") });
  },
};`;

/** Reads, lists and imports what its request names, and emits what stopped each. */
const probeCode = `
import fs from "node:fs";
import { pathToFileURL } from "node:url";
export default {
  name: "Probe",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  async run(event) {
    const out = { read: {}, list: {}, import: {} };
    for (const f of event.body.files) {
      try { out.read[f] = fs.readFileSync(f, "utf8").length; } catch (e) { out.read[f] = e.code; }
    }
    for (const f of event.body.folders) {
      try { out.list[f] = fs.readdirSync(f); } catch (e) { out.list[f] = e.code; }
    }
    for (const f of event.body.imports) {
      try { await import(pathToFileURL(f).href); out.import[f] = "allowed"; } catch (e) { out.import[f] = e.code ?? e.message; }
    }
    this.$emit(out);
  },
};`;

let server: TestServer;
before(async () => {
  server = await startServer({}, { FOUNT_EXECUTOR_SPARES: "2", FOUNT_EXECUTOR_IDLE_S: "1" });
  // Executors under uids of their own (as root) must reach the data dir.
  fs.chmodSync(server.dataDir, 0o755);
});
after(() => server?.close());

function pool(): ExecutorPool {
  return server.built.services.executor as ExecutorPool;
}
const waitingSpares = () => waitingSparesOf(server);

/** pids of this server's spare processes, taken or not, with the folder each may read. */
function spareProcessesOf(s: TestServer): Map<number, string> {
  const out = new Map<number, string>();
  const prefix = path.join(fs.realpathSync(s.dataDir), "spares");
  for (const name of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    let argv: string[];
    try {
      argv = fs.readFileSync(`/proc/${name}/cmdline`, "utf8").split("\0");
    } catch {
      continue;
    }
    const grant = argv.find((a) => a.startsWith(`--allow-fs-read=${prefix}/`));
    if (grant) out.set(Number(name), grant.slice("--allow-fs-read=".length));
  }
  return out;
}

/** The scratch folder a process may write (its only writable place). */
function scratchOf(pid: number): string {
  const argv = fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
  return argv.find((a) => a.startsWith("--allow-fs-write="))!.slice("--allow-fs-write=".length);
}

/** Waits until `check` holds, up to `ms` (a loaded machine starts processes slowly). */
async function until(what: string, check: () => boolean, ms = 60_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Spares waiting with no owner: started, folder still empty. */
function waitingSparesOf(s: TestServer): number[] {
  return [...spareProcessesOf(s)]
    .filter(([, folder]) => fs.readdirSync(folder).length === 0)
    .map(([pid]) => pid);
}

/** The bundle of `code` built for `ownerId`'s executor: `<set>/owners/<owner's folder>/<sha256 of code>.mjs`. */
function bundleIn(code: string, ownerId: string, s: TestServer): string {
  const name = `${createHash("sha256").update(code).digest("hex")}.mjs`;
  const found = fs
    .readdirSync(path.join(s.dataDir, "packages"), { recursive: true, withFileTypes: true })
    .find((e) => e.isFile() && e.name === name && path.basename(e.parentPath) === ownerFolderName(ownerId));
  assert.ok(found, "the bundle is on disk");
  return path.join(found.parentPath, found.name);
}

test("a tenant's first hit after its executor stopped idle runs in a spare, with its packages and scratch", async () => {
  await until("two spares", () => pool().spareCount === 2 && waitingSpares().length === 2);
  const user = await server.createUser("first-hit");
  const source = await deploy(server, { component_code: whoCode, name: "who" }, user.key);
  // Stopped after a second idle (FOUNT_EXECUTOR_IDLE_S=1); the spare its deploy took is replaced.
  const first = pool().pidOf(user.id);
  await until("the tenant's executor to stop", () => pool().pidOf(user.id) === undefined);
  await until("its process to end", () => !fs.existsSync(`/proc/${first}`));
  await until("two spares again", () => waitingSpares().length === 2);
  const waiting = waitingSpares();
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  assert.match(metrics, /^fount_executor_spares(\{[^}]*\})? 2$/m, "the spares are counted in /metrics");

  const res = await hit(source.endpoint_url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ marker: "first" }),
  });
  assert.equal(res.status, 200, res.text);
  const [seen] = await emitted(server, source.id, user.key);
  assert.ok(waiting.includes(seen.pid), `ran in a waiting spare (${seen.pid} of ${waiting.join(", ")})`);
  assert.equal(pool().pidOf(user.id), seen.pid);
  assert.equal(seen.back, "first", "its scratch folder is writable");
  assert.equal(seen.tmp, scratchOf(seen.pid));
  assert.equal(seen.hour, 3_600_000, "its package resolves through the spare's links");
  const uid = pool()
    .stats()
    .find((s) => s.ownerId === user.id)?.uid;
  if (isRoot) {
    assert.notEqual(seen.uid, 0);
    assert.equal(seen.uid, uid, "the owner has the spare's uid");
    assert.equal(
      fs.statSync(path.dirname(bundleIn(whoCode, user.id, server))).gid,
      seen.uid,
      "its bundle folder is granted to it",
    );
  } else assert.equal(seen.uid, process.getuid?.());
});

test("a spare taken by one tenant cannot read another's scratch, bundle folder or another spare's folder", async () => {
  // Executors here are not stopped for being idle: Bob's must run while Alice's component probes it.
  const held = await startServer({}, { FOUNT_EXECUTOR_SPARES: "2" });
  try {
    fs.chmodSync(held.dataDir, 0o755);
    await probeAcross(held);
  } finally {
    await held.close();
  }
});

/** Bob's spare-born executor runs; Alice's, another spare, probes what is Bob's or another spare's. */
async function probeAcross(held: TestServer): Promise<void> {
  const executors = held.built.services.executor as ExecutorPool;
  const spares = () => spareProcessesOf(held);
  const waiting = () => waitingSparesOf(held);
  await until("two spares", () => waiting().length === 2);
  const bob = await held.createUser("bob");
  const bobSource = await deploy(held, { component_code: whoCode, name: "bob" }, bob.key);
  const secret = await hit(bobSource.endpoint_url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ marker: "bob's secret" }),
  });
  assert.equal(secret.status, 200, secret.text);
  const bobPid = executors.pidOf(bob.id)!;
  const bobSpare = spares().get(bobPid);
  assert.ok(bobSpare, "bob's executor is a spare");
  const bobMarker = path.join(scratchOf(bobPid), "marker.txt");
  const bobBundle = bundleIn(whoCode, bob.id, held);
  // Bob's bundle as his spare sees it, through the link in his spare's folder.
  const bobLinked = path.join(bobSpare, fs.realpathSync(bobBundle));
  assert.ok(fs.existsSync(bobLinked));

  await until("a spare for alice", () => waiting().length >= 1);
  const alice = await held.createUser("alice");
  const probe = await deploy(held, { component_code: probeCode, name: "probe" }, alice.key);
  const alicePid = executors.pidOf(alice.id)!;
  assert.ok(spares().has(alicePid), "alice's executor is a spare");
  await until("another waiting spare", () => waiting().length >= 1);
  const otherSpare = spares().get(waiting()[0]!)!;
  const files = [bobMarker, bobBundle, bobLinked];
  const folders = [
    path.dirname(bobMarker),
    path.dirname(bobBundle),
    bobSpare,
    otherSpare,
    path.dirname(bobSpare),
  ];
  const res = await hit(probe.endpoint_url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ files, folders, imports: [bobBundle, bobLinked] }),
  });
  assert.equal(res.status, 200, res.text);
  const [seen] = await emitted(held, probe.id, alice.key);
  for (const f of files) assert.match(String(seen.read[f]), denied, `read ${f}: ${JSON.stringify(seen)}`);
  for (const f of folders) assert.match(String(seen.list[f]), denied, `list ${f}: ${JSON.stringify(seen)}`);
  for (const f of [bobBundle, bobLinked])
    assert.match(String(seen.import[f]), denied, `import ${f}: ${JSON.stringify(seen)}`);

  if (!isRoot) return;
  // The kernel refuses as well, whatever the permission model does.
  const aliceUid = executors.stats().find((s) => s.ownerId === alice.id)!.uid!;
  const bobUid = executors.stats().find((s) => s.ownerId === bob.id)!.uid!;
  assert.notEqual(aliceUid, bobUid);
  const read = (file: string) =>
    `process.stdout.write(String(require("fs").readFileSync(${JSON.stringify(file)}).length))`;
  const list = (dir: string) => `require("fs").readdirSync(${JSON.stringify(dir)})`;
  for (const f of files) assert.equal(asUid(aliceUid, read(f)), "EACCES", `kernel, read ${f}`);
  for (const f of [bobSpare, otherSpare, path.dirname(bobSpare), path.dirname(bobMarker)])
    assert.equal(asUid(aliceUid, list(f)), "EACCES", `kernel, list ${f}`);
  assert.match(asUid(bobUid, read(bobMarker)), /^\d+$/, "bob's uid reads his own scratch");
}

test("FOUNT_EXECUTOR_SPARES=0 starts no spare, and a first hit starts the owner's own process", async () => {
  const off = await startServer({}, { FOUNT_EXECUTOR_SPARES: "0" });
  try {
    fs.chmodSync(off.dataDir, 0o755);
    const user = await off.createUser("no-spares");
    const source = await deploy(off, { component_code: whoCode, name: "who" }, user.key);
    const res = await hit(source.endpoint_url, { method: "POST" });
    assert.equal(res.status, 200, res.text);
    const [seen] = await emitted(off, source.id, user.key);
    const executors = off.built.services.executor as ExecutorPool;
    assert.equal(executors.spareCount, 0);
    assert.equal(seen.tmp, path.join(fs.realpathSync(off.dataDir), "scratch", user.id));
  } finally {
    await off.close();
  }
});
