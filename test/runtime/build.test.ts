import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { pathToFileURL } from "node:url";
import { bundleLocalComponent } from "../../src/cli/bundle.ts";
import { AppError } from "../../src/errors.ts";
import { ComponentBuilder, componentFromModule, parsePackageSpecifier } from "../../src/runtime/build.ts";
import { ownerFolderName } from "../../src/runtime/bundle-layout.ts";
import { fetchComponentCode, rawGitHubUrl } from "../../src/runtime/fetch-code.ts";
import type { BuiltComponent } from "../../src/runtime/types.ts";
import { localRegistry } from "../fixtures/npm-registry.ts";

// These tests install real packages from the npm registry; one cache keeps the file fast.
const npmCacheDir = fs.mkdtempSync(path.join(os.tmpdir(), "fount-npm-cache-"));
after(() => fs.rmSync(npmCacheDir, { recursive: true, force: true }));

function tempDir(t: { after(fn: () => void): void }): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "fount-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function builder(
  t: { after(fn: () => void): void },
  options: { registry?: string; installTimeoutMs?: number } = {},
) {
  const components = new ComponentBuilder({ dataDir: tempDir(t), npmCacheDir, ...options });
  return {
    build: (code: string, pinned?: Record<string, string>) => components.build(code, "u_test", pinned),
  };
}

/** The package set folder a build's packages are in: `<dataDir>/packages/<key>`. */
function setOf(built: BuiltComponent): string {
  return path.dirname(path.dirname(built.ownerDir!));
}

async function load(built: BuiltComponent): Promise<any> {
  return componentFromModule(await import(pathToFileURL(built.entryFile).href));
}

function installedVersion(built: BuiltComponent, name: string): string {
  const file = path.join(setOf(built), "node_modules", name, "package.json");
  return JSON.parse(fs.readFileSync(file, "utf8")).version;
}

async function rejection(promise: Promise<unknown>): Promise<AppError> {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof AppError, `expected an AppError, got ${String(err)}`);
    return err;
  }
  assert.fail("expected a rejection");
}

const exactVersion = /^\d+\.\d+\.\d+$/;

test("an ESM component builds into a module whose default export is the component", async (t) => {
  const code = `
    import ms from "ms";
    import { createHash } from "node:crypto";
    export default {
      name: "ESM", version: "0.0.1",
      methods: { hour: () => ms("1h"), digest: (s) => createHash("sha256").update(s).digest("hex").length },
    };`;
  const built = await builder(t).build(code);
  assert.equal(built.codeHash, createHash("sha256").update(code).digest("hex"));
  const ownerFolder = path.join(setOf(built), "owners", ownerFolderName("u_test"));
  assert.equal(built.entryFile, path.join(ownerFolder, `${built.codeHash}.mjs`));
  assert.equal(built.ownerDir, ownerFolder);
  assert.match(built.dependencies.ms, exactVersion);
  assert.deepEqual(Object.keys(built.dependencies), ["ms"]);
  const component = await load(built);
  assert.equal(component.name, "ESM");
  assert.equal(component.methods.hour(), 3_600_000);
  assert.equal(component.methods.digest("x"), 64);
});

test("a CommonJS component that requires packages and built-ins builds and imports", async (t) => {
  const code = `
    const isNumber = require("is-number");
    const path = require("path");
    module.exports = { name: "CJS", version: "0.0.1", checks: [isNumber(5), isNumber("x")], sep: path.sep };`;
  const built = await builder(t).build(code);
  assert.match(built.dependencies["is-number"], exactVersion);
  const component = await load(built);
  assert.deepEqual(component.checks, [true, false]);
  assert.equal(component.sep, "/");
});

test("a file mixing import with module.exports loads, as such registry files exist", async (t) => {
  const code = `
    import ms from "ms";
    const common = { props: { db: "$.service.db" } };
    module.exports = { ...common, name: "Mixed", version: "0.0.1", ms: ms("2s") };`;
  const component = await load(await builder(t).build(code));
  assert.equal(component.name, "Mixed");
  assert.equal(component.ms, 2000);
  assert.deepEqual(component.props, { db: "$.service.db" });
});

test("a TypeScript component using @pipedream/types and @pipedream/platform builds and imports", async (t) => {
  const code = `
    import { defineSource } from "@pipedream/types";
    import { axios, ConfigurationError } from "@pipedream/platform";
    interface Item { id: number }
    const pick = (items: Item[]): number[] => items.map((i) => i.id);
    export default defineSource({
      key: "ts-source", name: "TS", version: "0.0.1", type: "source",
      props: { db: "$.service.db" },
      methods: { pick, kinds: () => [typeof axios, typeof ConfigurationError] },
      async run() {},
    });`;
  const built = await builder(t).build(code);
  assert.deepEqual(Object.keys(built.dependencies), ["@pipedream/platform", "@pipedream/types"]);
  const component = await load(built);
  assert.equal(component.key, "ts-source");
  assert.deepEqual(component.methods.pick([{ id: 1 }, { id: 2 }]), [1, 2]);
  assert.deepEqual(component.methods.kinds(), ["function", "function"]);
});

test("an exact version in the specifier installs exactly that version into world-readable files", async (t) => {
  // A restrictive umask must not make the package folder unreadable to the sandbox's uid.
  const umask = process.umask(0o077);
  t.after(() => process.umask(umask));
  const built = await builder(t).build(
    `import axios from "axios@1.6.0"; export default { version: axios.VERSION };`,
  );
  assert.deepEqual(built.dependencies, { axios: "1.6.0" });
  assert.equal(installedVersion(built, "axios"), "1.6.0");
  assert.equal((await load(built)).version, "1.6.0");
  const mode = (file: string) => fs.statSync(file).mode & 0o777;
  assert.equal(mode(setOf(built)), 0o755);
  // As root the owner's bundle folder is closed until the pool grants it to the owner's executor gid.
  assert.equal(mode(path.dirname(built.entryFile)), process.getuid?.() === 0 ? 0o750 : 0o755);
  assert.equal(mode(path.dirname(path.dirname(built.entryFile))), 0o711);
  assert.equal(mode(built.entryFile), 0o644);
  assert.equal(mode(path.join(setOf(built), "node_modules", "axios")), 0o755);
  assert.equal(mode(path.join(setOf(built), "node_modules", "axios", "package.json")), 0o644);
});

test("the entry loads in a process whose permission model allows reading only readDirs", async (t) => {
  const built = await builder(t).build(`
    import axios from "axios@1.6.0";
    const isNumber = require("is-number@7.0.0");
    module.exports = { version: axios.VERSION, n: isNumber(2) };`);
  const probe = `const m = await import(${JSON.stringify(pathToFileURL(built.entryFile).href)}); console.log(JSON.stringify(m.default));`;
  const grants = built.readDirs.map((d) => `--allow-fs-read=${d}`);
  assert.deepEqual(built.readDirs, [built.ownerDir, path.join(setOf(built), "node_modules")]);
  const args = ["--permission", ...grants, "--input-type=module", "-e", probe];
  const out = execFileSync(process.execPath, args, { env: {}, encoding: "utf8" });
  assert.deepEqual(JSON.parse(out), { version: "1.6.0", n: true });
});

test("an unpinned import records the resolved version and a pinned rebuild reuses its folder", async (t) => {
  const components = builder(t);
  const code = `import ms from "ms"; export default { ms: ms("1m") };`;
  const first = await components.build(code);
  const resolved = first.dependencies.ms;
  assert.match(resolved, exactVersion);
  const again = await components.build(code, { ms: resolved });
  assert.deepEqual(again, first);
  const older = await components.build(code, { ms: "2.1.2" });
  assert.deepEqual(older.dependencies, { ms: "2.1.2" });
  assert.notEqual(setOf(older), setOf(first));
  assert.equal(installedVersion(older, "ms"), "2.1.2");
});

test("a scoped package with a version and a subpath is installed and imported by its plain path", async (t) => {
  const code = `import types from "@pipedream/types@0.3.4/dist/index.js"; export default { kind: typeof types.defineSource };`;
  const built = await builder(t).build(code);
  assert.deepEqual(built.dependencies, { "@pipedream/types": "0.3.4" });
  assert.match(fs.readFileSync(built.entryFile, "utf8"), /from "@pipedream\/types\/dist\/index\.js"/);
  assert.equal((await load(built)).kind, "function");
});

test("import, require() and dynamic import() of versioned packages are all installed with versions stripped", async (t) => {
  const code = `
    import ms from "ms@2.1.3";
    const isNumber = require("is-number@7.0.0");
    export default { ms: ms("1s"), n: isNumber(1), lazy: async () => (await import("ms@2.1.3")).default("1m") };`;
  const built = await builder(t).build(code);
  assert.deepEqual(built.dependencies, { "is-number": "7.0.0", ms: "2.1.3" });
  const bundle = fs.readFileSync(built.entryFile, "utf8");
  assert.doesNotMatch(bundle, /@2\.1\.3|@7\.0\.0/);
  const component = await load(built);
  assert.equal(component.ms, 1000);
  assert.equal(component.n, true);
  assert.equal(await component.lazy(), 60_000);
});

test("Node built-ins stay external and a component without packages still gets a folder", async (t) => {
  const code = `
    import fs from "fs";
    import { join } from "node:path";
    const os = require("node:os");
    export default { kinds: [typeof fs.readFileSync, typeof join, typeof os.cpus], zlib: () => import("zlib") };`;
  const built = await builder(t).build(code);
  assert.deepEqual(built.dependencies, {});
  assert.ok(fs.existsSync(path.join(setOf(built), "package.json")));
  assert.deepEqual(built.readDirs, [built.ownerDir]);
  const component = await load(built);
  assert.deepEqual(component.kinds, ["function", "function", "function"]);
  assert.equal(typeof (await component.zlib()).gzipSync, "function");
});

test("a syntax error is component_invalid with the message, line and column", async (t) => {
  const err = await rejection(builder(t).build(`const a = 1;\n\nexport default { a: 1 + };`));
  assert.equal(err.code, "component_invalid");
  assert.equal(err.status, 422);
  assert.deepEqual(err.details, { message: err.message, line: 3, column: 25 });
});

test("an unknown package fails with package_install_failed naming it", async (t) => {
  const name = "fount-test-no-such-package-5c1e0b7d";
  const err = await rejection(builder(t).build(`import x from "${name}@^1.0.0"; export default { x };`));
  assert.equal(err.code, "package_install_failed");
  assert.equal(err.status, 422);
  assert.match(err.message, new RegExp(`^Could not install ${name}@\\^1\\.0\\.0: `));
  assert.deepEqual(err.details, { package: name });
});

test("a relative import in code sent to the server is component_invalid pointing to fount deploy", async (t) => {
  const err = await rejection(
    builder(t).build(`import common from "../common/base.mjs"; export default { ...common };`),
  );
  assert.equal(err.code, "component_invalid");
  assert.match(err.message, /fount deploy/);
  const absolute = await rejection(
    builder(t).build(`const secret = require("/etc/passwd"); module.exports = { secret };`),
  );
  assert.equal(absolute.code, "component_invalid");
});

test("conflicting versions of one package and non-registry specifiers are component_invalid", async (t) => {
  const components = builder(t);
  const conflict = await rejection(
    components.build(`import a from "ms@2.1.3"; const b = require("ms@^2.0.0"); export default { a, b };`),
  );
  assert.equal(conflict.code, "component_invalid");
  assert.equal(conflict.details?.package, "ms");
  for (const spec of ["ms@file:/etc", "ms@github:vercel/ms", "https://example.com/x.js", "Bad Name"]) {
    const err = await rejection(components.build(`import x from "${spec}"; export default { x };`));
    assert.equal(err.code, "component_invalid", spec);
  }
});

test("bare specifiers are split into name, range and subpath", () => {
  assert.deepEqual(parsePackageSpecifier("axios"), { name: "axios", range: undefined, subpath: "" });
  assert.deepEqual(parsePackageSpecifier("axios@^0.20"), { name: "axios", range: "^0.20", subpath: "" });
  assert.deepEqual(parsePackageSpecifier("lodash.get@~4.4"), {
    name: "lodash.get",
    range: "~4.4",
    subpath: "",
  });
  assert.deepEqual(parsePackageSpecifier("@scope/pkg"), {
    name: "@scope/pkg",
    range: undefined,
    subpath: "",
  });
  assert.deepEqual(parsePackageSpecifier("@scope/pkg@1.2.3/sub/path"), {
    name: "@scope/pkg",
    range: "1.2.3",
    subpath: "/sub/path",
  });
  assert.deepEqual(parsePackageSpecifier("pkg/sub/path"), {
    name: "pkg",
    range: undefined,
    subpath: "/sub/path",
  });
  assert.equal(parsePackageSpecifier("pkg@file:../x"), undefined);
  assert.equal(parsePackageSpecifier(".hidden"), undefined);
});

test("componentFromModule unwraps a transpiled default export and leaves plain ones alone", async (t) => {
  const component = { name: "c" };
  assert.equal(componentFromModule({ default: component }), component);
  assert.equal(componentFromModule({ default: { __esModule: true, default: component } }), component);
  assert.equal(componentFromModule({}), undefined);
  // What tsc emits for `export default {...}` with module CommonJS.
  const code = `"use strict"; Object.defineProperty(exports, "__esModule", { value: true }); exports.default = { name: "tsc" };`;
  assert.equal((await load(await builder(t).build(code))).name, "tsc");
});

test("install scripts of packages never run and the configured registry is used", async (t) => {
  const marker = path.join(tempDir(t), "scripts-ran");
  const script = `node -e "require('fs').appendFileSync('${marker}', process.env.npm_lifecycle_event + ' ')"`;
  const { url: registry, hits } = await localRegistry(t, [
    {
      name: "fount-scripted",
      version: "1.0.0",
      scripts: { preinstall: script, install: script, postinstall: script },
    },
  ]);
  const built = await builder(t, { registry }).build(`import s from "fount-scripted"; export default { s };`);
  assert.deepEqual(built.dependencies, { "fount-scripted": "1.0.0" });
  assert.equal((await load(built)).s, "fount-scripted");
  assert.equal(hits.get("/fount-scripted/-/fount-scripted-1.0.0.tgz"), 1);
  assert.equal(fs.existsSync(marker), false, "an install script ran");
});

test("the npm cache is the server's alone (0700): no other uid can list or read what installs fetched", async (t) => {
  const { url: registry } = await localRegistry(t, [{ name: "fount-cached", version: "1.0.0" }]);
  const cache = path.join(tempDir(t), "npm-cache");
  const components = new ComponentBuilder({ dataDir: tempDir(t), npmCacheDir: cache, registry });
  await components.build(`import c from "fount-cached"; export default { c };`, "u_alice");
  // A private registry's tarballs and packuments land here; executors never need them.
  assert.equal(fs.statSync(cache).mode & 0o777, 0o700);
  if (process.getuid?.() !== 0) return;
  // A process under another uid (as an executor whose permission model were bypassed) is refused by the kernel.
  const probe = `try { require("fs").readdirSync(${JSON.stringify(cache)}); console.log("listed") } catch (e) { console.log(e.code) }`;
  const out = execFileSync(process.execPath, ["-e", probe], {
    env: {},
    uid: 1_999_999,
    gid: 1_999_999,
    encoding: "utf8",
  });
  assert.equal(out.trim(), "EACCES");
});

test("concurrent builds needing the same packages install them once", async (t) => {
  const { url: registry, hits } = await localRegistry(t, [{ name: "fount-shared", version: "2.0.0" }]);
  const components = builder(t, { registry });
  const built = await Promise.all(
    [1, 2, 3].map((n) => components.build(`import s from "fount-shared"; export default { n: ${n}, s };`)),
  );
  assert.equal(new Set(built.map((b) => setOf(b))).size, 1);
  assert.equal(new Set(built.map((b) => b.entryFile)).size, 3);
  assert.equal(hits.get("/fount-shared/-/fount-shared-2.0.0.tgz"), 1);
  assert.deepEqual(
    fs.readdirSync(path.dirname(setOf(built[0]))).filter((f) => f.startsWith(".tmp")),
    [],
  );
});

test("two owners importing the same package share node_modules, each with a bundle folder the other cannot read", async (t) => {
  const { url: registry } = await localRegistry(t, [{ name: "fount-common", version: "1.0.0" }]);
  const components = new ComponentBuilder({ dataDir: tempDir(t), npmCacheDir, registry });
  const code = (who: string) => `import c from "fount-common"; export default { who: "${who}", c };`;
  const alice = await components.build(code("alice"), "u_alice");
  const bob = await components.build(code("bob"), "u_bob");
  assert.equal(setOf(alice), setOf(bob));
  assert.equal(alice.readDirs[1], bob.readDirs[1]);
  assert.notEqual(alice.ownerDir, bob.ownerDir);
  // A node process granted bob's readDirs, as bob's executor is: his bundle loads with its package;
  // alice's bundle cannot be read, imported, nor the owners folder listed.
  const denied = (fn: string) => `try { ${fn}; console.log("allowed"); } catch (e) { console.log(e.code); }`;
  const probe = [
    `const m = await import(${JSON.stringify(pathToFileURL(bob.entryFile).href)}); console.log(JSON.stringify(m.default));`,
    `const fs = await import("node:fs");`,
    denied(`fs.readFileSync(${JSON.stringify(alice.entryFile)})`),
    denied(`fs.readdirSync(${JSON.stringify(path.dirname(bob.ownerDir!))})`),
    denied(`await import(${JSON.stringify(pathToFileURL(alice.entryFile).href)})`),
  ].join("\n");
  const grants = bob.readDirs.map((d) => `--allow-fs-read=${d}`);
  const args = ["--permission", ...grants, "--input-type=module", "-e", probe];
  const out = execFileSync(process.execPath, args, { env: {}, encoding: "utf8" }).trim().split("\n");
  assert.deepEqual(out, [
    JSON.stringify({ who: "bob", c: "fount-common" }),
    "ERR_ACCESS_DENIED",
    "ERR_ACCESS_DENIED",
    "ERR_ACCESS_DENIED",
  ]);
});

test("an install that outlasts the time limit fails with package_install_failed", async (t) => {
  const { url: registry } = await localRegistry(
    t,
    [{ name: "fount-slow", version: "1.0.0" }],
    ["fount-slow"],
  );
  const started = Date.now();
  const err = await rejection(
    builder(t, { registry, installTimeoutMs: 1500 }).build(
      `import s from "fount-slow"; export default { s };`,
    ),
  );
  assert.equal(err.code, "package_install_failed");
  assert.match(err.message, /^Could not install fount-slow@1\.0\.0: timed out/);
  assert.deepEqual(err.details, { package: "fount-slow" });
  assert.ok(Date.now() - started < 10_000);
});

test("an install past its time limit is stopped when the build fails: no temporary folder is left writing", async (t) => {
  const { url: registry } = await localRegistry(
    t,
    [{ name: "fount-stuck", version: "1.0.0" }],
    ["fount-stuck"],
  );
  const dataDir = tempDir(t);
  const components = new ComponentBuilder({ dataDir, npmCacheDir, registry, installTimeoutMs: 1500 });
  const err = await rejection(
    components.build(`import s from "fount-stuck"; export default { s };`, "u_test"),
  );
  assert.match(err.message, /^Could not install fount-stuck@1\.0\.0: timed out installing/);
  // The install process was killed before the build failed, so its folder is gone already.
  assert.deepEqual(fs.readdirSync(path.join(dataDir, "packages")), []);
});

test("an install process that runs out of its heap fails the build with package_install_failed", async (t) => {
  const { url: registry } = await localRegistry(t, [{ name: "fount-heavy", version: "1.0.0" }]);
  const dataDir = tempDir(t);
  // 12 MiB: less than loading arborist takes, so any install runs out.
  const components = new ComponentBuilder({ dataDir, npmCacheDir, registry, installer: { memoryMb: 12 } });
  const err = await rejection(
    components.build(`import h from "fount-heavy@1.0.0"; export default { h };`, "u_test"),
  );
  assert.equal(err.code, "package_install_failed");
  assert.equal(
    err.message,
    "Could not install fount-heavy@1.0.0: the install ran out of memory (its limit is 12 MiB)",
  );
  assert.deepEqual(fs.readdirSync(path.join(dataDir, "packages")), []);
});

function writeFiles(root: string, files: Record<string, string>): void {
  for (const [name, contents] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(root, name)), { recursive: true });
    fs.writeFileSync(path.join(root, name), contents);
  }
}

test("a multi-file component bundled by bundleLocalComponent builds, installs its packages and imports", async (t) => {
  const root = tempDir(t);
  writeFiles(root, {
    // An app file in ESM, required extension-less from CommonJS as registry components do.
    "thing.app.mjs": `export default { type: "app", app: "thing", methods: { greet(n) { return "hi " + n; } } };`,
    // A common base in CommonJS with a versioned package.
    "sources/common/base.js": `
      const isNumber = require("is-number@7.0.0");
      const app = require("../../thing.app");
      module.exports = { props: { thing: app.default ?? app }, methods: { isNum: (x) => isNumber(x) } };`,
    // A broken mix: import next to module.exports in an .mjs file.
    "sources/common/webhook.mjs": `
      import ms from "ms@2.1.3";
      import base from "./base";
      module.exports = { ...base, methods: { ...base.methods, ttl: () => ms("1h") } };`,
    "sources/new-thing/constants.ts": `export const EVENT: string = "created";`,
    // The source in TypeScript, importing the mix by path and a TS file without extension.
    "sources/new-thing/new-thing.ts": `
      import common from "../common/webhook.mjs";
      import { EVENT } from "./constants";
      import { defineSource } from "@pipedream/types";
      export default defineSource({
        ...common,
        key: "thing-new", name: "New Thing", version: "0.1.0", type: "source",
        props: { ...common.props, db: "$.service.db" },
        methods: { ...common.methods, event: (): string => EVENT },
        async run() {},
      });`,
  });
  const code = await bundleLocalComponent(path.join(root, "sources/new-thing/new-thing.ts"));
  // Package imports stay visible to the server exactly as written, require() included.
  assert.match(code, /require\("is-number@7\.0\.0"\)/);
  assert.match(code, /from "ms@2\.1\.3"/);
  assert.match(code, /from "@pipedream\/types"/);
  assert.doesNotMatch(code, /__require\("/);
  assert.ok(!code.includes(root), "the bundle leaks a local path");

  const built = await builder(t).build(code);
  assert.deepEqual(Object.keys(built.dependencies), ["@pipedream/types", "is-number", "ms"]);
  assert.equal(built.dependencies["is-number"], "7.0.0");
  assert.equal(built.dependencies.ms, "2.1.3");
  const component = await load(built);
  assert.equal(component.key, "thing-new");
  assert.deepEqual(Object.keys(component.props), ["thing", "db"]);
  assert.equal(component.props.thing.methods.greet("you"), "hi you");
  assert.equal(component.methods.isNum(3), true);
  assert.equal(component.methods.ttl(), 3_600_000);
  assert.equal(component.methods.event(), "created");
});

test("bundleLocalComponent keeps ESM-only packages imported by .mjs files working", async (t) => {
  const root = tempDir(t);
  writeFiles(root, {
    "s.mjs": `import escape from "escape-string-regexp@5.0.0"; export default { name: "e", version: "1", out: escape("a.b") };`,
    "c.js": `const { name } = require("./s.mjs").default; module.exports = { name, version: "1" };`,
  });
  const esm = await load(await builder(t).build(await bundleLocalComponent(path.join(root, "s.mjs"))));
  assert.equal(esm.out, "a\\.b");
  const cjs = await load(await builder(t).build(await bundleLocalComponent(path.join(root, "c.js"))));
  assert.deepEqual(cjs, { name: "e", version: "1" });
});

test("bundleLocalComponent reports a syntax error with its file, line and column", async (t) => {
  const root = tempDir(t);
  writeFiles(root, {
    "s.mjs": `import base from "./base.mjs";\nexport default { ...base };`,
    "base.mjs": `export default {\n  props: { a: },\n};`,
  });
  const err = await rejection(bundleLocalComponent(path.join(root, "s.mjs")));
  assert.equal(err.code, "component_invalid");
  assert.deepEqual(err.details, { message: err.message, line: 2, column: 15, file: "base.mjs" });
});

async function codeServer(t: { after(fn: () => void): void }) {
  const server = http.createServer((req, res) => {
    if (req.url === "/component.mjs") return res.end("export default { name: 'remote' };\n");
    if (req.url === "/big") return res.end("x".repeat(2048));
    if (req.url === "/big-chunked") {
      res.write("x".repeat(1024));
      return res.end("x".repeat(1024));
    }
    if (req.url === "/slow") return; // never answers
    res.writeHead(404).end("not here");
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

test("fetchComponentCode returns the code at an http URL", async (t) => {
  const base = await codeServer(t);
  assert.equal(await fetchComponentCode(`${base}/component.mjs`), "export default { name: 'remote' };\n");
});

test("fetchComponentCode rejects non-2xx answers, oversize bodies, slow servers and other schemes", async (t) => {
  const base = await codeServer(t);
  const cases: Array<[() => Promise<string>, RegExp]> = [
    [() => fetchComponentCode(`${base}/missing`), /HTTP 404/],
    [() => fetchComponentCode(`${base}/big`, { maxBytes: 1024 }), /larger than 1024 bytes/],
    [() => fetchComponentCode(`${base}/big-chunked`, { maxBytes: 1500 }), /larger than 1500 bytes/],
    [() => fetchComponentCode(`${base}/slow`, { timeoutMs: 200 }), /timed out/],
    [() => fetchComponentCode("file:///etc/passwd"), /http or https/],
    [() => fetchComponentCode("ftp://example.com/x.mjs"), /http or https/],
    [() => fetchComponentCode("not a url"), /not a valid URL/],
  ];
  for (const [fetchIt, message] of cases) {
    const err = await rejection(fetchIt());
    assert.equal(err.code, "invalid_parameter");
    assert.equal(err.details?.field, "component_url");
    assert.match(err.message, message);
  }
});

test("a GitHub blob URL is fetched from raw.githubusercontent.com", () => {
  assert.equal(
    rawGitHubUrl("https://github.com/PipedreamHQ/pipedream/blob/master/components/http/sources/x/x.mjs"),
    "https://raw.githubusercontent.com/PipedreamHQ/pipedream/master/components/http/sources/x/x.mjs",
  );
  assert.equal(
    rawGitHubUrl("https://github.com/o/r/raw/v1.2/a.js"),
    "https://raw.githubusercontent.com/o/r/v1.2/a.js",
  );
  assert.equal(rawGitHubUrl("https://github.com/o/r"), "https://github.com/o/r");
  assert.equal(
    rawGitHubUrl("https://example.com/o/r/blob/main/a.js"),
    "https://example.com/o/r/blob/main/a.js",
  );
});
