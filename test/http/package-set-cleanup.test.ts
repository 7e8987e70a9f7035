/**
 * What package installs leave on disk, against an npm registry served by the test itself: the npm cache
 * is kept across installs and emptied once it passes FOUNT_NPM_CACHE_MAX_MB; package set folders that no
 * source uses, not built since the start (nor within FOUNT_PACKAGE_SET_GRACE_MS before it), are removed
 * at the first build after a start and after each install; and a set over FOUNT_INSTALL_MAX_MB never lands.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { runAndRead } from "../fixtures/components/fixtures.ts";
import { localRegistry } from "../fixtures/npm-registry.ts";
import { startServer, type TestServer } from "../helpers.ts";

type Cleanup = { after(fn: () => unknown): void };

function componentImporting(name: string): string {
  return `import p from "${name}@1.0.0";
export default { name: "Imports ${name}", version: "0.0.1", type: "source",
  async run() { this.$emit({ packages: [p] }); } };
`;
}

/** The package set folders of the server, without the dot-named ones (temporary, being removed). */
function packageSets(server: TestServer): string[] {
  return fs
    .readdirSync(path.join(server.dataDir, "packages"))
    .filter((name) => !name.startsWith("."))
    .sort();
}

async function serverOn(t: Cleanup, env: Record<string, string>): Promise<TestServer> {
  const server = await startServer({}, env);
  t.after(() => server.close());
  return server;
}

test("package sets no source uses go at the next start, or after an install", async (t) => {
  const registry = await localRegistry(
    t,
    ["fount-first", "fount-second", "fount-third", "fount-fourth"].map((name) => ({
      name,
      version: "1.0.0",
    })),
  );
  const cache = fs.mkdtempSync(path.join(os.tmpdir(), "fount-npm-cache-"));
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "fount-test-"));
  const env = { FOUNT_NPM_REGISTRY: registry.url, FOUNT_NPM_CACHE: cache, FOUNT_PACKAGE_SET_GRACE_MS: "0" };
  let server = await startServer({ dataDir }, env);
  t.after(async () => {
    await server.close();
    fs.rmSync(cache, { recursive: true, force: true });
    fs.rmSync(dataDir, { recursive: true, force: true });
  });
  const deploy = async (code: string) => {
    const res = await server.api("POST", "/v1/sources", { body: { component_code: code } });
    assert.equal(res.status, 200, res.text);
    return res.body.data.id as string;
  };
  const newSet = (...known: string[]) => packageSets(server).find((name) => !known.includes(name))!;

  const source = await deploy(componentImporting("fount-first"));
  const first = newSet();
  // The source's dependencies change: a second set.
  const updated = await server.api("PUT", `/v1/sources/${source}`, {
    body: { component_code: componentImporting("fount-second") },
  });
  assert.equal(updated.status, 200, updated.text);
  assert.deepEqual((await runAndRead(server, source)).packages, ["fount-second"]);
  const second = newSet(first);
  // Saved and never deployed: a third set; another source: a fourth.
  const saved = await server.api("POST", "/v1/components", {
    body: { component_code: componentImporting("fount-third") },
  });
  assert.equal(saved.status, 200, saved.text);
  const third = newSet(first, second);
  const other = await deploy(componentImporting("fount-fourth"));
  const fourth = newSet(first, second, third);
  // Sets built since the start stay until the next one: executors may read them for as long as they live.
  assert.deepEqual(packageSets(server), [first, second, third, fourth].sort());

  // At the first build after a start, the first set (no source) and the third (saved only) go.
  await server.close();
  server = await startServer({ dataDir }, env);
  assert.deepEqual((await runAndRead(server, source)).packages, ["fount-second"]);
  assert.deepEqual(packageSets(server), [second, fourth].sort());
  // A set no source uses any more goes after the next install: the other source is deleted.
  assert.equal((await server.api("DELETE", `/v1/sources/${other}`)).status, 200);
  // The saved component still deploys: its set is installed again.
  const again = await server.api("POST", "/v1/sources", { body: { component_id: saved.body.data.id } });
  assert.equal(again.status, 200, again.text);
  assert.deepEqual((await runAndRead(server, again.body.data.id)).packages, ["fount-third"]);
  assert.deepEqual(packageSets(server), [second, third].sort());
});

/** Bytes of the files under `dir`. */
function bytesUnder(dir: string): number {
  let total = 0;
  for (const entry of fs.readdirSync(dir, { withFileTypes: true, recursive: true }))
    if (entry.isFile()) total += fs.statSync(path.join(entry.parentPath, entry.name)).size;
  return total;
}

test("the npm cache serves later installs, and is emptied once it holds more than FOUNT_NPM_CACHE_MAX_MB", async (t) => {
  const registry = await localRegistry(t, [
    { name: "fount-cached", version: "1.0.0", files: { "blob.txt": "x".repeat(64 * 1024) } },
    { name: "fount-again", version: "1.0.0" },
  ]);
  const cache = fs.mkdtempSync(path.join(os.tmpdir(), "fount-npm-cache-"));
  t.after(() => fs.rmSync(cache, { recursive: true, force: true }));
  const env = { FOUNT_NPM_REGISTRY: registry.url, FOUNT_NPM_CACHE: cache };
  // Under its bound (1 GiB by default) the cache keeps what the install fetched.
  const keeping = await serverOn(t, env);
  const kept = await keeping.api("POST", "/v1/components", {
    body: { component_code: componentImporting("fount-cached") },
  });
  assert.equal(kept.status, 200, kept.text);
  assert.ok(bytesUnder(cache) > 0, "the install's tarball and packument are cached");
  await keeping.close();
  // Past its bound (0 here) it is emptied once the install has ended.
  const emptying = await serverOn(t, { ...env, FOUNT_NPM_CACHE_MAX_MB: "0" });
  const res = await emptying.api("POST", "/v1/components", {
    body: { component_code: componentImporting("fount-again") },
  });
  assert.equal(res.status, 200, res.text);
  const deadline = Date.now() + 60_000;
  while (fs.readdirSync(cache).length > 0) {
    assert.ok(Date.now() < deadline, `the cache still holds ${fs.readdirSync(cache).join(", ")}`);
    await new Promise((r) => setTimeout(r, 50));
  }
});

test("a package set over FOUNT_INSTALL_MAX_MB leaves no folder behind", async (t) => {
  const registry = await localRegistry(t, [
    // Zeros: the tarball stays a few KiB, the installed file is 2 MiB.
    { name: "fount-zbig", version: "1.0.0", files: { "blob.txt": "\0".repeat(2 * 2 ** 20) } },
  ]);
  const cache = fs.mkdtempSync(path.join(os.tmpdir(), "fount-npm-cache-"));
  t.after(() => fs.rmSync(cache, { recursive: true, force: true }));
  const server = await serverOn(t, {
    FOUNT_NPM_REGISTRY: registry.url,
    FOUNT_NPM_CACHE: cache,
    FOUNT_INSTALL_MAX_MB: "1",
  });
  const res = await server.api("POST", "/v1/components", {
    body: { component_code: componentImporting("fount-zbig") },
  });
  assert.equal(res.status, 422, res.text);
  assert.equal(res.body.code, "package_install_failed");
  assert.deepEqual(fs.readdirSync(path.join(server.dataDir, "packages")), []);
});
