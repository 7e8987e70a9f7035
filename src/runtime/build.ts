/**
 * Turns component source code into a `BuiltComponent`: one ESM bundle whose bare imports resolve from
 * a content-addressed package folder installed with install scripts disabled. See docs/runtime-build.md.
 */
import { createHash, randomBytes } from "node:crypto";
import fs from "node:fs/promises";
import { isBuiltin } from "node:module";
import path from "node:path";
import * as esbuild from "esbuild";
import { AppError } from "../errors.ts";
import { OWNER_DIR_MODE, OWNERS_DIR_MODE, ownerBundleDir } from "./bundle-layout.ts";
import { type InstallerOptions, PackageInstaller } from "./install/installer.ts";
import { PackageSetPruner } from "./install/package-sets.ts";
import type { BuiltComponent } from "./types.ts";

/** Options of a `ComponentBuilder`; one builder (and one npm cache) serves the whole server. */
export interface ComponentBuilderOptions {
  /** Server data folder; packages and bundles go to `<dataDir>/packages`. */
  dataDir: string;
  /** npm cache (cacache) folder shared by every install; default `<dataDir>/npm-cache`. */
  npmCacheDir?: string;
  /** npm registry URL; default https://registry.npmjs.org. */
  registry?: string;
  /** Budget for resolving and installing one component's packages; default 120 s. */
  installTimeoutMs?: number;
  /** Bounds of the install processes (install/installer.ts); defaults in `DEFAULT_INSTALLER`. */
  installer?: Partial<InstallerOptions>;
  /**
   * Package versions of the components sources use: their package set folders are kept, and the others
   * not built since the start removed at the first build after a start and after each install
   * (install/package-sets.ts). Unset: nothing is removed.
   */
  keptPackageSets?: () => Promise<Iterable<Record<string, string>>>;
  /** A package set built within this long before a start is kept even when no source uses it; default 10 minutes. */
  packageSetGraceMs?: number;
}

/** A bare import split into its parts: `@scope/pkg@^1.2/sub` → `@scope/pkg`, `^1.2`, `/sub`. */
export interface PackageSpecifier {
  name: string;
  /** Version range or dist-tag written in the specifier, when there is one. */
  range: string | undefined;
  /** `""` or a path starting with `/`. */
  subpath: string;
}

const DEFAULT_INSTALL_TIMEOUT_MS = 120_000;
// Time to deploy a component saved a moment ago without installing its packages again.
const DEFAULT_PACKAGE_SET_GRACE_MS = 10 * 60_000;
// Two installs use both cores of a small host and leave the rest waiting; googleapis with aws-sdk installs
// even at a 64 MiB heap and takes 362 MiB on disk, so 512 MiB of each leave room (docs/runtime-build.md).
const DEFAULT_INSTALLER: InstallerOptions = { concurrency: 2, memoryMb: 512, maxMb: 512, cacheMaxMb: 1024 };
// One registry request should never eat the whole install budget; npm's own default is 5 minutes.
const REGISTRY_REQUEST_TIMEOUT_MS = 30_000;

const SPECIFIER = /^((?:@[^/@]+\/)?[^/@]+)(?:@([^/]*))?(\/.*)?$/;
// npm names, including legacy ones with capitals; never `.`/`_`-led, which would be path tricks.
const PACKAGE_NAME = /^(?:@[a-z0-9~-][\w.~-]*\/)?[a-z0-9~-][\w.~-]*$/i;
// Semver ranges and dist-tags only: `:` and `/` would let `file:`, `git+…` or URL specs through.
const RANGE = /^[\w.^~<>=|* +-]+$/;
const EXACT_VERSION = /^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$/;

// Output is ESM; CommonJS parts of a bundle call `require` for external packages, which ESM lacks.
// esbuild renames a user's own top-level `require` binding, so this name never collides.
const REQUIRE_BANNER =
  'import { createRequire as __fountCreateRequire } from "node:module";\n' +
  "const require = __fountCreateRequire(import.meta.url);";

/** Splits a bare import specifier; `undefined` when it is not a valid npm package reference. */
export function parsePackageSpecifier(specifier: string): PackageSpecifier | undefined {
  const match = SPECIFIER.exec(specifier);
  if (!match) return undefined;
  const [, name, range, subpath = ""] = match;
  if (!PACKAGE_NAME.test(name)) return undefined;
  if (range !== undefined && !RANGE.test(range)) return undefined;
  return { name, range: range?.trim() || undefined, subpath };
}

/**
 * The component object of an imported built module: its default export, unwrapped once more when
 * that default is a transpiled ES module (`{ __esModule: true, default }`, as CJS bundles of ESM give).
 */
export function componentFromModule(mod: unknown): unknown {
  const value = (mod as { default?: unknown } | null | undefined)?.default;
  if (value !== null && (typeof value === "object" || typeof value === "function")) {
    const inner = value as { __esModule?: unknown; default?: unknown };
    if (inner.__esModule && "default" in inner) return inner.default;
  }
  return value;
}

/** Bundles component code and installs the packages it imports, once per distinct package set. */
export class ComponentBuilder {
  readonly #packagesDir: string;
  readonly #cacheDir: string;
  readonly #registry: string | undefined;
  readonly #installTimeoutMs: number;
  readonly #installer: PackageInstaller;
  readonly #inflight = new Map<string, Promise<string>>();
  readonly #pruner: PackageSetPruner | undefined;
  #started: Promise<void> | undefined;
  /** The npm cache made the server's alone, once per builder (`closeCache`). */
  #cacheClosed: Promise<void> | undefined;

  constructor(options: ComponentBuilderOptions) {
    this.#packagesDir = path.resolve(options.dataDir, "packages");
    this.#cacheDir = path.resolve(options.npmCacheDir ?? path.join(options.dataDir, "npm-cache"));
    this.#registry = options.registry;
    this.#installTimeoutMs = options.installTimeoutMs ?? DEFAULT_INSTALL_TIMEOUT_MS;
    this.#installer = new PackageInstaller({ ...DEFAULT_INSTALLER, ...options.installer });
    const kept = options.keptPackageSets;
    this.#pruner = kept
      ? new PackageSetPruner(
          this.#packagesDir,
          async () => [...(await kept())].map(packageSetKey),
          options.packageSetGraceMs ?? DEFAULT_PACKAGE_SET_GRACE_MS,
        )
      : undefined;
  }

  /** Removes the package set folders no source uses (install/package-sets.ts); failures wait for the next pass. */
  async #prune(): Promise<void> {
    await this.#pruner?.prune().catch(() => undefined);
  }

  /**
   * Builds `code` for the executor of `owner` (the user or organization whose process will run it): the
   * bundle goes to that owner's folder of the package set (bundle-layout.ts), so each owner that runs a
   * component has its own copy. `pinned` holds exact versions recorded when the component was first
   * saved; they win over ranges and tags in the code, but not over an exact version written in a specifier.
   */
  async build(code: string, owner: string, pinned: Record<string, string> = {}): Promise<BuiltComponent> {
    const codeHash = createHash("sha256").update(code).digest("hex");
    await mkdirReadable(this.#packagesDir);
    const { bundle, imports } = await bundleServerCode(code, this.#packagesDir);
    const wanted = wantedRanges(imports);
    const deadline = Date.now() + this.#installTimeoutMs;
    if (wanted.size > 0) {
      this.#cacheClosed ??= closeCache(this.#cacheDir).catch((err) => {
        this.#cacheClosed = undefined;
        throw err;
      });
      await this.#cacheClosed;
    }
    const dependencies = await this.#resolveVersions(wanted, pinned, deadline);
    const key = packageSetKey(dependencies);
    this.#started ??= this.#prune();
    const work = async (): Promise<BuiltComponent> => {
      const dir = await this.#ensurePackages(key, dependencies, wanted, deadline);
      const ownerDir = await makeOwnerDir(dir, owner);
      const entryFile = path.join(ownerDir, `${codeHash}.mjs`);
      await writeReadable(entryFile, bundle);
      // The empty package set has no node_modules; a bundle reads nothing else of the set's folder.
      const modules = path.join(dir, "node_modules");
      const readDirs = (await exists(modules)) ? [ownerDir, modules] : [ownerDir];
      return { codeHash, entryFile, ownerDir, readDirs, dependencies };
    };
    return this.#pruner ? this.#pruner.hold(key, work) : work();
  }

  /** One exact version per package: written, pinned, or else asked of the registry (in an install process). */
  async #resolveVersions(
    wanted: Map<string, string | undefined>,
    pinned: Record<string, string>,
    deadline: number,
  ): Promise<Record<string, string>> {
    const versions: Array<[string, string]> = [];
    const unknown: string[] = [];
    for (const [name, range] of wanted) {
      const pin = pinned[name];
      if (range !== undefined && EXACT_VERSION.test(range)) versions.push([name, range]);
      else if (pin !== undefined && EXACT_VERSION.test(pin)) versions.push([name, pin]);
      else unknown.push(name);
    }
    if (unknown.length > 0) {
      const specs = unknown.map((name) => `${name}@${wanted.get(name) ?? "latest"}`);
      const resolved = await this.#installer.resolve(specs, this.#npmOptions(), deadline);
      for (const [i, name] of unknown.entries()) {
        const { version, error } = resolved[i]!;
        if (version === undefined) throw installFailed(name, wanted.get(name), error);
        versions.push([name, version]);
      }
    }
    return Object.fromEntries(versions.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  }

  /** The package folder for `key`, installing it unless this or another process already has. */
  async #ensurePackages(
    key: string,
    dependencies: Record<string, string>,
    wanted: Map<string, string | undefined>,
    deadline: number,
  ): Promise<string> {
    const dir = path.join(this.#packagesDir, key);
    if (await exists(dir)) return dir;
    let pending = this.#inflight.get(key);
    if (!pending) {
      pending = this.#install(dir, dependencies, wanted, deadline).finally(() => this.#inflight.delete(key));
      this.#inflight.set(key, pending);
    }
    return pending;
  }

  async #install(
    dir: string,
    dependencies: Record<string, string>,
    wanted: Map<string, string | undefined>,
    deadline: number,
  ): Promise<string> {
    const tmp = path.join(
      this.#packagesDir,
      `.tmp-${path.basename(dir).slice(0, 16)}-${randomBytes(6).toString("hex")}`,
    );
    await mkdirReadable(tmp);
    const manifest = { private: true, description: "Packages of Fount components", dependencies };
    await writeReadable(path.join(tmp, "package.json"), `${JSON.stringify(manifest, null, 2)}\n`);
    const names = Object.keys(dependencies);
    try {
      // The install process makes the tree readable for executors; it has exited when this settles.
      if (names.length > 0) await this.#installer.install(tmp, this.#npmOptions(), deadline);
    } catch (err) {
      await fs.rm(tmp, { recursive: true, force: true });
      const name = blamedPackage(err, names);
      throw installFailed(name, wanted.get(name) ?? dependencies[name], err);
    }
    try {
      await fs.rename(tmp, dir);
    } catch (err) {
      await fs.rm(tmp, { recursive: true, force: true });
      // Another process finished the same package set first: its folder is as good as ours.
      if (!(await exists(dir))) throw err;
    }
    // This build holds its set; the pass removes those of components no source uses any more.
    await this.#prune();
    return dir;
  }

  #npmOptions(): Record<string, unknown> {
    return {
      cache: this.#cacheDir,
      ...(this.#registry ? { registry: this.#registry } : {}),
      ignoreScripts: true,
      audit: false,
      fund: false,
      timeout: REGISTRY_REQUEST_TIMEOUT_MS,
    };
  }
}

interface ImportedPackage {
  name: string;
  range: string | undefined;
}

/** Bundles server-side code: every bare import stays external with its version stripped. */
async function bundleServerCode(
  code: string,
  workingDir: string,
): Promise<{ bundle: string; imports: ImportedPackage[] }> {
  const imports: ImportedPackage[] = [];
  const plugin: esbuild.Plugin = {
    name: "fount-externals",
    setup(build) {
      build.onResolve({ filter: /.*/ }, (args) => {
        const spec = args.path;
        if (isBuiltin(spec)) return { path: spec, external: true };
        if (/^[./\\]/.test(spec) || /^[a-z]:[\\/]/i.test(spec)) {
          return rejectImport(
            spec,
            `Relative import "${spec}" cannot be resolved on the server: deploy with \`fount deploy <file>\`, which bundles local files into the component`,
          );
        }
        const parsed = spec.includes(":") ? undefined : parsePackageSpecifier(spec);
        if (!parsed)
          return rejectImport(spec, `Import "${spec}" is neither a Node built-in nor an npm package`);
        imports.push({ name: parsed.name, range: parsed.range });
        return { path: parsed.name + parsed.subpath, external: true };
      });
    },
  };
  try {
    const result = await esbuild.build({
      stdin: { contents: code, loader: "ts", sourcefile: "component" },
      absWorkingDir: workingDir,
      tsconfigRaw: {},
      bundle: true,
      format: "esm",
      platform: "node",
      target: "node24",
      charset: "utf8",
      banner: { js: REQUIRE_BANNER },
      // The executor maps load errors and stack traces back to the author's own lines with this;
      // a map that came with the code (`fount deploy <file>`'s) is chained in, naming their files.
      sourcemap: "external",
      sourcesContent: false,
      // Names the map's output; nothing is written.
      outfile: path.join(workingDir, "component.mjs"),
      write: false,
      logLevel: "silent",
      plugins: [plugin],
    });
    const js = result.outputFiles.find((f) => !f.path.endsWith(".map"))!;
    const map = result.outputFiles.find((f) => f.path.endsWith(".map"));
    return { bundle: map ? inlineMap(js.text, map.text) : js.text, imports };
  } catch (err) {
    throw isBuildFailure(err) ? buildFailure(err) : err;
  }
}

/**
 * `code` with `map` inlined. File names of a map that came with the code stay inside the bundle's
 * folder (`../../x.mjs` → `x.mjs`, `/home/a/x.mjs` → `x.mjs`), so that resolved against the bundle
 * they never name a folder of the server in a stack trace.
 */
function inlineMap(code: string, map: string): string {
  const parsed = JSON.parse(map) as { sources: string[] };
  parsed.sources = parsed.sources.map((s) =>
    path.posix.isAbsolute(s) || /^[a-z]+:/i.test(s) ? path.posix.basename(s) : s.replace(/^(?:\.\.\/)+/, ""),
  );
  const data = Buffer.from(JSON.stringify(parsed)).toString("base64");
  return `${code.replace(/\n?$/, "\n")}//# sourceMappingURL=data:application/json;base64,${data}\n`;
}

function rejectImport(spec: string, message: string): esbuild.OnResolveResult {
  return {
    errors: [
      { text: message, detail: new AppError("component_invalid", message, { details: { import: spec } }) },
    ],
  };
}

/** Whether `err` is esbuild's failure of a build (problems in the code), not a bug or an I/O error. */
export function isBuildFailure(err: unknown): err is esbuild.BuildFailure {
  const { errors, warnings } = (err ?? {}) as { errors?: unknown; warnings?: unknown };
  return err instanceof Error && Array.isArray(errors) && errors.length > 0 && Array.isArray(warnings);
}

/**
 * Maps an esbuild failure to `component_invalid` with the first message and its position (line and
 * column 1-based); `withFile` adds the file the message is about.
 */
export function buildFailure(err: esbuild.BuildFailure, withFile = false): AppError {
  const { errors } = err;
  const planted = errors.find((e) => e.detail instanceof AppError);
  if (planted) return planted.detail as AppError;
  const first = errors[0];
  const details: Record<string, unknown> = { message: first.text };
  if (first.location) {
    details.line = first.location.line;
    details.column = first.location.column + 1;
    if (withFile) details.file = first.location.file;
  }
  return new AppError("component_invalid", first.text, { details, cause: err });
}

/** One range per package: an unversioned import defers to a versioned one, two different ranges conflict. */
function wantedRanges(imports: ImportedPackage[]): Map<string, string | undefined> {
  const wanted = new Map<string, string | undefined>();
  for (const { name, range } of imports) {
    const seen = wanted.get(name);
    if (seen !== undefined && range !== undefined && seen !== range) {
      throw new AppError(
        "component_invalid",
        `Package ${name} is imported with conflicting versions "${seen}" and "${range}"; use one version in every import`,
        { details: { package: name, ranges: [seen, range] } },
      );
    }
    wanted.set(name, seen ?? range);
  }
  return wanted;
}

/** Folder name of a package set: the same exact versions on the same Node major and platform share it. */
function packageSetKey(dependencies: Record<string, string>): string {
  const list = Object.entries(dependencies)
    .map(([name, version]) => `${name}@${version}`)
    .sort();
  const nodeMajor = process.versions.node.split(".")[0];
  const hash = createHash("sha256");
  hash.update(
    JSON.stringify({ packages: list, node: nodeMajor, platform: `${process.platform}-${process.arch}` }),
  );
  return hash.digest("hex");
}

function installFailed(name: string, range: string | undefined, err: unknown): AppError {
  const label = range === undefined ? name : `${name}@${range}`;
  return new AppError("package_install_failed", `Could not install ${label}: ${installReason(err)}`, {
    details: { package: name },
    cause: err,
  });
}

function installReason(err: unknown): string {
  const { code, message } = (err ?? {}) as { code?: unknown; message?: unknown };
  if (code === "E404") return "not found in the npm registry";
  if (code === "ETARGET") return "no published version matches";
  const text = typeof message === "string" ? message : String(err);
  return text.split("\n")[0];
}

/** Which top-level package an install error is about, when the error names one; else the first. */
function blamedPackage(err: unknown, names: string[]): string {
  const { pkgid, message } = (err ?? {}) as { pkgid?: unknown; message?: unknown };
  const haystack = `${typeof pkgid === "string" ? pkgid : ""} ${typeof message === "string" ? message : ""}`;
  // Longest first, so that `lodash.get` is not blamed as `lodash`.
  const byLength = [...names].sort((a, b) => b.length - a.length);
  return byLength.find((name) => haystack.includes(name)) ?? names[0];
}

async function exists(file: string): Promise<boolean> {
  try {
    await fs.access(file);
    return true;
  } catch {
    return false;
  }
}

// The sandbox runs under another uid and only reads; a restrictive umask must not hide files from it.
/**
 * The npm cache holds every tarball and packument the installs fetched (a private registry's too) and
 * is for the server only: mode 0700, so that no executor uid can list or read it even if Node's
 * permission model were bypassed (it is never granted). npm creates it 0755 otherwise.
 */
async function closeCache(dir: string): Promise<void> {
  await fs.mkdir(dir, { recursive: true, mode: 0o700 });
  await fs.chmod(dir, 0o700);
}

async function mkdirReadable(dir: string): Promise<void> {
  await fs.mkdir(dir, { recursive: true, mode: 0o755 });
  await fs.chmod(dir, 0o755);
}

/**
 * Creates the owner's bundle folder (and the set's `owners/`, which others may pass but not list). As
 * root it is 0750 with root's group, closed to every executor until the pool grants it to the owner's
 * gid (executors/grants.ts); otherwise 0755, as bundle folders always were. An existing one is left as
 * it is: its group may be the owner's already.
 */
async function makeOwnerDir(packageSetDir: string, owner: string): Promise<string> {
  const dir = ownerBundleDir(packageSetDir, owner);
  const owners = path.dirname(dir);
  await fs.mkdir(owners, { recursive: true, mode: OWNERS_DIR_MODE });
  await fs.chmod(owners, OWNERS_DIR_MODE);
  const mode = process.getuid?.() === 0 ? OWNER_DIR_MODE : 0o755;
  try {
    await fs.mkdir(dir, { mode });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "EEXIST") return dir;
    throw err;
  }
  await fs.chmod(dir, mode);
  return dir;
}

async function writeReadable(file: string, contents: string): Promise<void> {
  const tmp = `${file}.${randomBytes(6).toString("hex")}.tmp`;
  await fs.writeFile(tmp, contents, { mode: 0o644 });
  await fs.chmod(tmp, 0o644);
  await fs.rename(tmp, file);
}
