/**
 * What the pool grants an executor to read (runtime/executors/grants.ts): a component built into one
 * owner's bundle folder runs in that owner's executor only, and the walk that opens shared folders to
 * executor uids survives files that a concurrent build removes under it.
 */
import assert from "node:assert/strict";
import fsp from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, mock, test } from "node:test";
import { ownerBundleDir } from "../../src/runtime/bundle-layout.ts";
import { ExecutorPool } from "../../src/runtime/executor-pool.ts";
import type { BuiltComponent, InvokeRequest } from "../../src/runtime/types.ts";

const isRoot = process.getuid?.() === 0;
const code = `export default { name: "Ok", version: "1", run() { this.$emit({ ok: true }); } };`;
let tmp: string;
let pool: ExecutorPool;

before(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), "fount-grants-"));
  // Executor uids must be able to pass through to the code and data folders (mkdtemp makes 0700).
  await fsp.chmod(tmp, 0o711);
  pool = new ExecutorPool({ dataDir: path.join(tmp, "data"), memoryMb: 64, defaultTimeoutMs: 5000 });
});
after(async () => {
  await pool.close();
  await fsp.rm(tmp, { recursive: true, force: true });
});

function request(ownerId: string, sourceId: string, component: BuiltComponent): InvokeRequest {
  return {
    ownerId,
    sourceId,
    component,
    props: {},
    dbProps: [],
    httpProps: [],
    db: {},
    dbVersion: 0,
    invocation: { kind: "run", event: {} },
    timeoutMs: 5000,
  };
}

/** A component written where the builder would put it for `ownerId`, in a package set of its own. */
async function builtFor(ownerId: string): Promise<BuiltComponent> {
  const ownerDir = ownerBundleDir(path.join(tmp, "data", "packages", "set"), ownerId);
  await fsp.mkdir(ownerDir, { recursive: true, mode: 0o755 });
  const entryFile = path.join(ownerDir, "ok.mjs");
  await fsp.writeFile(entryFile, code, { mode: 0o644 });
  return { codeHash: "x", entryFile, ownerDir, readDirs: [ownerDir], dependencies: {} };
}

test("a component built for one owner does not run in another owner's executor", async () => {
  const built = await builtFor("u_one");
  const own = await pool.invoke(request("u_one", "dc_own", built));
  assert.equal(own.error, undefined, JSON.stringify(own.error));
  assert.deepEqual(own.emits[0]?.event, { ok: true });
  const other = await pool.invoke(request("u_two", "dc_other", built));
  assert.equal(other.error?.code, "executor_crash");
  assert.match(other.error?.message ?? "", /built for another owner/);
});

test("a file that vanishes while a shared folder is opened to executor uids does not crash the call", async (t) => {
  if (!isRoot) {
    t.skip("folders are opened to other uids only when executors run under uids of their own (as root)");
    return;
  }
  const shared = path.join(tmp, "shared");
  await fsp.mkdir(shared, { mode: 0o755 });
  await fsp.writeFile(path.join(shared, "ok.mjs"), code, { mode: 0o600 });
  // As a build renames its temporary file away between the walk's listing and its look at the file.
  const readdir = fsp.readdir;
  mock.method(fsp, "readdir", async (dir: string, ...rest: unknown[]) => {
    const names = await (readdir as (...a: unknown[]) => Promise<string[]>)(dir, ...rest);
    return dir === shared ? [...names, "ok.mjs.3f2a.tmp"] : names;
  });
  t.after(() => mock.restoreAll());
  const component = {
    codeHash: "x",
    entryFile: path.join(shared, "ok.mjs"),
    readDirs: [shared],
    dependencies: {},
  };
  const result = await pool.invoke(request("u_walk", "dc_walk", component));
  assert.equal(result.error, undefined, JSON.stringify(result.error));
  assert.deepEqual(result.emits[0]?.event, { ok: true });
});
