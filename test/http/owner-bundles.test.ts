/**
 * One tenant's executor cannot reach another tenant's component code. Components that import the same
 * packages (here none: the empty package set, so no npm access is needed) share a package set folder,
 * where bundles of every tenant used to sit side by side in `components/`, readable by every executor
 * granted the folder. Bundles now live in a folder per owner (runtime/bundle-layout.ts), and an
 * executor is granted its own owner's folder only; as root the kernel closes the others too.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { deploy, emitted, hit } from "../fixtures/components/fixtures.ts";
import { asUid, startServer, type TestServer } from "../helpers.ts";

const isRoot = process.getuid?.() === 0;
/** Access refusals of Node's permission model, or of the OS when a path slips past it. */
const denied = /^(ERR_ACCESS_DENIED|EACCES)$/;

/** A component without imports whose code holds something its owner alone may see. */
const secretCode = (marker: string) => `
export default {
  name: "Secret",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  run() { this.$emit({ secret: "${marker}" }); },
};`;

/** Tries to read, list and import the paths its request names, and emits what stopped each. */
const probeCode = `
import fs from "node:fs";
import { pathToFileURL } from "node:url";
export default {
  name: "Probe",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  async run(event) {
    const { file, folders } = event.body;
    const out = { list: {} };
    try { out.read = fs.readFileSync(file, "utf8").length; } catch (e) { out.read = e.code; }
    for (const f of folders) {
      try { out.list[f] = fs.readdirSync(f); } catch (e) { out.list[f] = e.code; }
    }
    try { await import(pathToFileURL(file).href); out.import = "allowed"; } catch (e) { out.import = e.code ?? e.message; }
    this.$emit(out);
  },
};`;

/** Every file under `dir` named `<sha256 of code>.mjs`: where the server put that code's bundle. */
function bundlesOf(dir: string, code: string): string[] {
  const name = `${createHash("sha256").update(code).digest("hex")}.mjs`;
  return fs
    .readdirSync(path.join(dir, "packages"), { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile() && e.name === name)
    .map((e) => path.join(e.parentPath, e.name));
}

/** The uid of an owner's executor: its scratch folder is owned by it. */
function executorUid(server: TestServer, ownerId: string): number {
  return fs.statSync(path.join(server.dataDir, "scratch", ownerId)).uid;
}

let server: TestServer;
before(async () => {
  server = await startServer();
  // Executors under uids of their own (as root) must reach the data dir.
  fs.chmodSync(server.dataDir, 0o755);
});
after(async () => {
  await server?.close();
});

test("a tenant's component cannot read, list or import another tenant's bundle; each runs its own", async () => {
  const alice = await server.createUser("alice");
  const bob = await server.createUser("bob");
  const marker = `alice-only-${process.pid}-${Date.now()}`;
  const code = secretCode(marker);
  const secret = await deploy(server, { component_code: code }, alice.key);
  const probe = await deploy(server, { component_code: probeCode }, bob.key);

  const [bundle] = bundlesOf(server.dataDir, code);
  assert.ok(bundle, "alice's bundle is on disk");
  const [bobBundle] = bundlesOf(server.dataDir, probeCode);
  // Both import nothing: one package set, the empty one.
  const setDir = path.dirname(path.dirname(path.dirname(bundle)));
  assert.equal(path.dirname(path.dirname(path.dirname(bobBundle!))), setDir, "one package set");
  const owners = path.join(setDir, "owners");
  const folders = [path.dirname(bundle), owners];

  const res = await hit(probe.endpoint_url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ file: bundle, folders }),
  });
  assert.equal(res.status, 200, res.text);
  const [seen] = await emitted(server, probe.id, bob.key);
  assert.match(String(seen.read), denied, `read: ${JSON.stringify(seen)}`);
  for (const folder of folders)
    assert.match(String(seen.list[folder]), denied, `list ${folder}: ${JSON.stringify(seen)}`);
  // As root the kernel refuses the resolver's look at the file first, which Node reports as not found.
  assert.match(
    String(seen.import),
    /^(ERR_ACCESS_DENIED|EACCES|ERR_MODULE_NOT_FOUND)$/,
    `import: ${JSON.stringify(seen)}`,
  );

  // Alice's own source runs, from her own folder.
  assert.equal((await hit(secret.endpoint_url, { method: "POST" })).status, 200);
  assert.deepEqual((await emitted(server, secret.id, alice.key)).at(-1), { secret: marker });
  assert.notEqual(path.dirname(bundle), path.dirname(bobBundle!));

  if (!isRoot) return;
  // The kernel refuses as well, whatever the permission model does.
  const aliceUid = executorUid(server, alice.id);
  const bobUid = executorUid(server, bob.id);
  assert.notEqual(aliceUid, bobUid);
  const mode = (p: string) => fs.statSync(p).mode & 0o7777;
  const aliceFolder = fs.statSync(path.dirname(bundle));
  assert.deepEqual([aliceFolder.uid, aliceFolder.gid, mode(path.dirname(bundle))], [0, aliceUid, 0o750]);
  const bobFolder = fs.statSync(path.dirname(bobBundle!));
  assert.deepEqual([bobFolder.uid, bobFolder.gid, mode(path.dirname(bobBundle!))], [0, bobUid, 0o750]);
  assert.deepEqual([fs.statSync(owners).uid, mode(owners)], [0, 0o711]);
  const read = (file: string) =>
    `process.stdout.write(String(require("fs").readFileSync(${JSON.stringify(file)}).length))`;
  assert.equal(asUid(bobUid, read(bundle)), "EACCES");
  assert.equal(asUid(bobUid, `require("fs").readdirSync(${JSON.stringify(owners)})`), "EACCES");
  assert.match(asUid(aliceUid, read(bundle)), /^\d+$/, "alice's uid reads her own bundle");
});

test("a bundle in the shared folder of an older version runs after a restart, and that folder goes", async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "fount-owner-bundles-"));
  fs.chmodSync(dataDir, 0o755);
  try {
    let first: TestServer | undefined = await startServer({ dataDir });
    const user = await first.createUser("upgrader");
    const code = secretCode("from before the upgrade");
    const source = await deploy(first, { component_code: code }, user.key);
    await first.close();
    first = undefined;

    // What an older version left: the bundle in `<set>/components/`, shared by every owner.
    const [bundle] = bundlesOf(dataDir, code);
    assert.ok(bundle);
    let setDir = path.dirname(bundle);
    if (path.basename(setDir) !== "components") setDir = path.dirname(path.dirname(setDir));
    else setDir = path.dirname(setDir);
    const legacy = path.join(setDir, "components");
    fs.mkdirSync(legacy, { recursive: true });
    fs.renameSync(bundle, path.join(legacy, path.basename(bundle)));
    fs.rmSync(path.join(setDir, "owners"), { recursive: true, force: true });

    const second = await startServer({ dataDir });
    try {
      const res = await hit(source.endpoint_url.replace(/^http:\/\/[^/]+/, second.endpoints), {
        method: "POST",
      });
      assert.equal(res.status, 200, res.text);
      assert.deepEqual((await emitted(second, source.id, user.key)).at(-1), {
        secret: "from before the upgrade",
      });
      assert.equal(fs.existsSync(legacy), false, "the shared components folder is removed");
      const [moved] = bundlesOf(dataDir, code);
      assert.equal(path.dirname(path.dirname(moved!)), path.join(setDir, "owners"));
    } finally {
      await second.close();
    }
  } finally {
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});

test("an owner folder granted in an earlier run is closed to every executor at the next start", async (t) => {
  if (!isRoot) {
    t.skip("bundle folders get executor groups only when executors run under uids of their own (as root)");
    return;
  }
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "fount-owner-bundles-"));
  fs.chmodSync(dataDir, 0o755);
  try {
    const first = await startServer({ dataDir });
    const alice = await first.createUser("alice");
    const bob = await first.createUser("bob");
    const code = secretCode("alice's, from the first run");
    const secret = await deploy(first, { component_code: code }, alice.key);
    const [bundle] = bundlesOf(dataDir, code);
    const folder = path.dirname(bundle!);
    assert.equal(fs.statSync(folder).gid, executorUid(first, alice.id));
    await first.close();

    // Executor gids are handed out anew: whoever starts first may get the gid alice had.
    const second = await startServer({ dataDir });
    try {
      const probe = await deploy(second, { component_code: probeCode }, bob.key);
      const bobUid = executorUid(second, bob.id);
      assert.deepEqual([fs.statSync(folder).gid, fs.statSync(folder).mode & 0o7777], [0, 0o750]);
      const read = `require("fs").readFileSync(${JSON.stringify(bundle)})`;
      assert.equal(asUid(bobUid, read), "EACCES");
      assert.ok(probe.id);
      const url = secret.endpoint_url.replace(/^http:\/\/[^/]+/, second.endpoints);
      assert.equal((await hit(url, { method: "POST" })).status, 200);
      assert.equal(fs.statSync(folder).gid, executorUid(second, alice.id));
    } finally {
      await second.close();
    }
  } finally {
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});
