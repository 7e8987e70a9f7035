/**
 * Entry of an install process (installer.ts forks it): resolves versions with pacote or installs one
 * package set with arborist, so that a big dependency tree costs this process's event loop and heap, not
 * the server's. It takes one request over IPC, answers, and exits; install scripts never run.
 */
import fs from "node:fs/promises";
import { createRequire } from "node:module";
import path from "node:path";
import type { InstallError, InstallReply, InstallRequest, NpmOptions } from "./protocol.ts";

// pacote and arborist ship no type declarations; these are the parts Fount uses.
interface Pacote {
  manifest(spec: string, options: NpmOptions): Promise<{ name: string; version: string }>;
}
type ArboristClass = new (options: NpmOptions) => { reify(options: NpmOptions): Promise<unknown> };

const requireCjs = createRequire(import.meta.url);

// The server went away (or gave up on this install): nobody waits for the result any more.
process.once("disconnect", () => process.exit(1));
process.once("message", (request: InstallRequest) => {
  // Exit explicitly: the registry agent's keep-alive sockets would hold the process open.
  handle(request).then(
    () => process.exit(0),
    () => process.exit(1),
  );
});

async function handle(request: InstallRequest): Promise<void> {
  if (request.op === "resolve") await resolveAll(request.specs, request.npm);
  else await installSet(request.dir, request.maxBytes, request.npm);
}

/** Answers each spec as soon as it settles, so that on a timeout the server knows which one was slow. */
async function resolveAll(specs: string[], npm: NpmOptions): Promise<void> {
  const pacote = requireCjs("pacote") as Pacote;
  await Promise.all(
    specs.map(async (spec, index) => {
      try {
        const manifest = await pacote.manifest(spec, { ...npm, ignoreScripts: true });
        await send({ type: "resolved", index, version: manifest.version });
      } catch (err) {
        await send({ type: "resolved", index, error: plainError(err) });
      }
    }),
  );
}

async function installSet(dir: string, maxBytes: number, npm: NpmOptions): Promise<void> {
  try {
    const Arborist = requireCjs("@npmcli/arborist") as ArboristClass;
    const arborist = new Arborist({ path: dir, ...npm, ignoreScripts: true, binLinks: false });
    await arborist.reify({ save: false, audit: false, fund: false });
    const sizes = await makeTreeReadable(dir);
    const bytes = [...sizes.values()].reduce((sum, n) => sum + n, 0);
    if (bytes > maxBytes) {
      const message = `the installed packages take ${mebibytes(bytes)} MiB, over the limit of ${mebibytes(maxBytes)} MiB`;
      const pkgid = biggest(await wantedNames(dir), sizes);
      return send({ type: "installed", error: { message, code: "ETOOLARGE", pkgid } });
    }
    await send({ type: "installed", bytes });
  } catch (err) {
    await send({ type: "installed", error: plainError(err) });
  }
}

function send(reply: InstallReply): Promise<void> {
  return new Promise((resolve, reject) => {
    process.send!(reply, undefined, {}, (err: Error | null) => (err ? reject(err) : resolve()));
  });
}

/** npm's errors carry `code` (E404, ETARGET…) and `pkgid`; the server maps those, and the first line. */
function plainError(err: unknown): InstallError {
  const { code, pkgid, message } = (err ?? {}) as { code?: unknown; pkgid?: unknown; message?: unknown };
  return {
    message: typeof message === "string" ? message : String(err),
    ...(typeof code === "string" ? { code } : {}),
    ...(typeof pkgid === "string" ? { pkgid } : {}),
  };
}

function mebibytes(bytes: number): string {
  return (bytes / 2 ** 20).toFixed(bytes < 2 ** 20 ? 2 : 0);
}

async function wantedNames(dir: string): Promise<string[]> {
  const manifest = JSON.parse(await fs.readFile(path.join(dir, "package.json"), "utf8"));
  return Object.keys(manifest.dependencies ?? {});
}

/** Of the packages the component imports, the one whose own folder is the largest: blamed for the size. */
function biggest(names: string[], sizes: Map<string, number>): string | undefined {
  let best: string | undefined;
  let bestBytes = -1;
  for (const name of names) {
    const bytes = sizes.get(name) ?? 0;
    if (bytes > bestBytes) [best, bestBytes] = [name, bytes];
  }
  return best;
}

/**
 * Folders 0755, files 0644 (0755 when they were executable); symlinks are left alone: executors run
 * under another uid and only read, and a restrictive umask must not hide files from them. Returns the
 * bytes of the files per top-level folder of `node_modules` (`""` for the rest).
 */
async function makeTreeReadable(root: string): Promise<Map<string, number>> {
  const sizes = new Map<string, number>();
  const fix = async (file: string, directory: boolean) => {
    const { mode, size } = await fs.stat(file);
    const wanted = directory || mode & 0o111 ? 0o755 : 0o644;
    if ((mode & 0o7777) !== wanted) await fs.chmod(file, wanted);
    if (directory) return;
    const owner = topLevelPackage(path.relative(root, file));
    sizes.set(owner, (sizes.get(owner) ?? 0) + size);
  };
  await fix(root, true);
  for (const entry of await fs.readdir(root, { recursive: true, withFileTypes: true })) {
    if (entry.isDirectory() || entry.isFile())
      await fix(path.join(entry.parentPath, entry.name), entry.isDirectory());
  }
  return sizes;
}

/** `node_modules/@s/p/x.js` → `@s/p`, `node_modules/p/x.js` → `p`, anything else → `""`. */
function topLevelPackage(relative: string): string {
  const [top, first, second] = relative.split(path.sep);
  if (top !== "node_modules" || first === undefined || second === undefined) return "";
  return first.startsWith("@") ? `${first}/${second}` : first;
}
