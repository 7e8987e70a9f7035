/**
 * Package installs of deployed components, against an npm registry served by the test itself: they run
 * in processes of their own (heap cap, none of the server's environment), at most
 * FOUNT_INSTALL_CONCURRENCY at once, and a package set over FOUNT_INSTALL_MAX_MB is refused and removed.
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

/** A server on `registry` with an npm cache of its own, so that every tarball is really downloaded. */
async function serverOn(t: Cleanup, registry: string, env: Record<string, string> = {}): Promise<TestServer> {
  const cache = fs.mkdtempSync(path.join(os.tmpdir(), "fount-npm-cache-"));
  const server = await startServer({}, { FOUNT_NPM_REGISTRY: registry, FOUNT_NPM_CACHE: cache, ...env });
  t.after(async () => {
    await server.close();
    fs.rmSync(cache, { recursive: true, force: true });
  });
  return server;
}

function componentImporting(...specs: string[]): string {
  const imports = specs.map((spec, i) => `import p${i} from "${spec}";`).join("\n");
  const values = specs.map((_, i) => `p${i}`).join(", ");
  return `${imports}
export default { name: "Imports", version: "0.0.1", type: "source",
  async run() { this.$emit({ packages: [${values}] }); } };
`;
}

/** The install processes this (server) process runs now, read from /proc: their argv and environment. */
function installProcesses(): Array<{ argv: string[]; env: string[] }> {
  const found: Array<{ argv: string[]; env: string[] }> = [];
  for (const pid of fs.readdirSync("/proc").filter((f) => /^\d+$/.test(f))) {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
      // Fields after the command name, which may hold spaces and parentheses: state, then the parent's pid.
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (ppid !== process.pid) continue;
      const argv = fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
      if (!argv.some((a) => a.endsWith(path.join("install", "child.ts")))) continue;
      found.push({ argv, env: fs.readFileSync(`/proc/${pid}/environ`, "utf8").split("\0") });
    } catch {
      // The process ended while being read.
    }
  }
  return found;
}

test("an imported package is installed by a process of its own with a heap cap and none of the server's environment", {
  skip: process.platform !== "linux" && "reads /proc",
}, async (t) => {
  process.env.FOUNT_TEST_INSTALL_SECRET = "not-for-installs";
  t.after(() => delete process.env.FOUNT_TEST_INSTALL_SECRET);
  const registry = await localRegistry(t, [{ name: "fount-held", version: "1.0.0" }], ["fount-held"]);
  const server = await serverOn(t, registry.url, { FOUNT_INSTALL_MEMORY_MB: "200" });
  const code = componentImporting("fount-held@1.0.0");
  const deploy = server.api("POST", "/v1/sources", { body: { component_code: code } });
  await registry.requested("fount-held");
  // The download is held: the install is under way, and it is not the server's own process doing it.
  const installs = installProcesses();
  assert.equal(installs.length, 1, "one install process while the tarball downloads");
  assert.ok(installs[0]!.argv.includes("--max-old-space-size=200"), installs[0]!.argv.join(" "));
  assert.ok(process.env.FOUNT_TEST_INSTALL_SECRET);
  assert.equal(installs[0]!.env.filter((v) => v.startsWith("FOUNT_TEST_INSTALL_SECRET=")).length, 0);
  registry.release("fount-held");
  const res = await deploy;
  assert.equal(res.status, 200, res.text);
  assert.deepEqual((await runAndRead(server, res.body.data.id)).packages, ["fount-held"]);
  assert.deepEqual(installProcesses(), []);
});

test("a package set bigger than FOUNT_INSTALL_MAX_MB is refused naming its biggest package, and removed", async (t) => {
  const registry = await localRegistry(t, [
    { name: "fount-small", version: "1.0.0" },
    // Zeros: the tarball stays a few KiB, the installed file is 2 MiB.
    { name: "fount-zbig", version: "1.0.0", files: { "blob.txt": "\0".repeat(2 * 2 ** 20) } },
  ]);
  const server = await serverOn(t, registry.url, { FOUNT_INSTALL_MAX_MB: "1" });
  const code = componentImporting("fount-small@1.0.0", "fount-zbig@1.0.0");
  const res = await server.api("POST", "/v1/components", { body: { component_code: code } });
  assert.equal(res.status, 422, res.text);
  assert.equal(res.body.code, "package_install_failed");
  assert.equal(
    res.body.error,
    "Could not install fount-zbig@1.0.0: the installed packages take 2 MiB, over the limit of 1 MiB",
  );
  assert.deepEqual(res.body.details, { package: "fount-zbig" });
  const packages = path.join(server.dataDir, "packages");
  assert.deepEqual(fs.readdirSync(packages), [], "neither the package set nor its temporary folder is left");
  // Under the limit the same registry installs fine.
  const small = await server.api("POST", "/v1/components", {
    body: { component_code: componentImporting("fount-small@1.0.0") },
  });
  assert.equal(small.status, 200, small.text);
});

test("with FOUNT_INSTALL_CONCURRENCY=1 a second install waits for the first to finish", async (t) => {
  const names = ["fount-first", "fount-second"];
  const registry = await localRegistry(
    t,
    names.map((name) => ({ name, version: "1.0.0" })),
    names,
  );
  const server = await serverOn(t, registry.url, { FOUNT_INSTALL_CONCURRENCY: "1" });
  const deploys = names.map((name) =>
    server.api("POST", "/v1/components", { body: { component_code: componentImporting(`${name}@1.0.0`) } }),
  );
  const first = await Promise.race(names.map((name) => registry.requested(name).then(() => name)));
  const second = names.find((name) => name !== first)!;
  // Unbounded, the second download starts at once; bounded, never before the first install ends. The
  // wait only gives an unbounded server the time to show it: a bounded one passes whatever the delay.
  const early = await Promise.race([
    registry.requested(second).then(() => true),
    new Promise<boolean>((resolve) => setTimeout(resolve, 2000, false)),
  ]);
  assert.equal(early, false, `${second} was downloaded while ${first} was still installing`);
  registry.release(first);
  await registry.requested(second);
  registry.release(second);
  for (const res of await Promise.all(deploys)) assert.equal(res.status, 200, res.text);
});

test("a package the registry does not know is package_install_failed, as before installs had processes", async (t) => {
  const registry = await localRegistry(t, []);
  const server = await serverOn(t, registry.url);
  const code = componentImporting("fount-nowhere@^1.0.0");
  const res = await server.api("POST", "/v1/components", { body: { component_code: code } });
  assert.equal(res.status, 422, res.text);
  assert.equal(res.body.code, "package_install_failed");
  assert.equal(res.body.error, "Could not install fount-nowhere@^1.0.0: not found in the npm registry");
  assert.deepEqual(res.body.details, { package: "fount-nowhere" });
});
