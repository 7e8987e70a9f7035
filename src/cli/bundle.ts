/**
 * `fount deploy` bundling: a local component file and the local files it imports become one code
 * string for `POST /components`. Package imports stay as written (`"axios@1.6.0"`) so that the server
 * still sees, pins and installs them.
 */
import fs from "node:fs/promises";
import path from "node:path";
import * as esbuild from "esbuild";
import { buildFailure, isBuildFailure } from "../runtime/build.ts";

// Components import local files without extensions in every flavour (`../../http.app`, `../app/rss.app`).
const RESOLVE_EXTENSIONS = [".ts", ".mts", ".cts", ".js", ".mjs", ".cjs", ".json"];

/**
 * Bundles `file` with its relative imports into one ES module. Package imports stay as written:
 * `import` statements of ES modules are kept by esbuild; `require("pkg")` in CommonJS files, which
 * esbuild would hide inside an opaque `__require("pkg")` call, is written back as `require("pkg")` so
 * the server's bundler sees it (the server defines `require` in ESM bundles).
 *
 * ESM output rather than CommonJS: in a CommonJS bundle, an `.mjs` file's `import x from "pkg"` becomes
 * esbuild's Node-mode interop over `require("pkg")`, which hands an ESM-only package's whole namespace
 * over as `x` instead of its default export.
 */
export async function bundleLocalComponent(file: string): Promise<string> {
  return (await bundleLocalFiles(file)).code;
}

/** A bundled local component and the local files it was built from. */
export interface LocalBundle {
  /** One ES module, with an inline source map naming the author's files when it fits. */
  code: string;
  /** Absolute paths of every local file the bundle read (the entry first): what `fount dev` watches. */
  inputs: string[];
}

/** `bundleLocalComponent`, also naming the files read. A bundling error throws `component_invalid`. */
export async function bundleLocalFiles(file: string): Promise<LocalBundle> {
  const entry = path.resolve(file);
  const workingDir = path.dirname(entry);
  // `.mjs` files that use `module.exports` next to `import` exist among real components; esbuild
  // treats them as ESM, where `module` is undefined. Its warning names them for a second pass.
  const first = await runBuild(entry, workingDir, new Set());
  const mixed = new Set(
    first.warnings
      .filter((w) => w.id === "commonjs-variable-in-esm" && w.location)
      .map((w) => path.resolve(workingDir, w.location!.file)),
  );
  const outcome = mixed.size === 0 ? first : await runBuild(entry, workingDir, mixed);
  if (outcome.error) throw buildFailure(outcome.error, true);
  const inputs = [entry, ...(outcome.inputs ?? []).filter((f) => f !== entry)];
  return { code: withSourceMap(outcome.code ?? "", outcome.map, workingDir), inputs };
}

// The API takes component code up to 1 MiB; a map that would push a bundle past it is left out.
const MAX_CODE_BYTES = 1024 * 1024;

/**
 * The bundle with its source map inlined, the map's file names made relative to the deepest folder
 * holding them all (`sources/hello/hello.mjs`, `hello.app.mjs`): the server chains this map into its
 * own, so that stack traces in `$errors` name the author's files and lines, without local paths.
 */
function withSourceMap(code: string, map: string | undefined, workingDir: string): string {
  if (map === undefined) return code;
  const parsed = JSON.parse(map) as { sources: string[]; sourceRoot?: string };
  const absolute = parsed.sources.map((s) => path.resolve(workingDir, s));
  const root = commonFolder(absolute);
  parsed.sources = absolute.map((s) => path.relative(root, s).split(path.sep).join("/"));
  delete parsed.sourceRoot;
  const comment = `\n//# sourceMappingURL=data:application/json;base64,${Buffer.from(JSON.stringify(parsed)).toString("base64")}\n`;
  const withMap = code.replace(/\n?$/, comment);
  return Buffer.byteLength(withMap) <= MAX_CODE_BYTES ? withMap : code;
}

/** The deepest folder that holds every one of `files`. */
function commonFolder(files: string[]): string {
  const split = files.map((f) => path.dirname(f).split(path.sep));
  const first = split[0] ?? [];
  let n = 0;
  while (n < first.length && split.every((parts) => parts[n] === first[n])) n++;
  return first.slice(0, n).join(path.sep) || path.sep;
}

interface BuildOutcome {
  code?: string;
  /** The source map (JSON) of `code`. */
  map?: string;
  /** Absolute paths of the local files read. */
  inputs?: string[];
  error?: esbuild.BuildFailure;
  warnings: esbuild.Message[];
}

async function runBuild(entry: string, workingDir: string, mixedFiles: Set<string>): Promise<BuildOutcome> {
  const requiredExternals = new Set<string>();
  try {
    const result = await esbuild.build({
      entryPoints: [entry],
      absWorkingDir: workingDir,
      // Names the map's output; nothing is written.
      outfile: path.join(workingDir, "component.bundle.mjs"),
      bundle: true,
      format: "esm",
      platform: "node",
      target: "node24",
      charset: "utf8",
      resolveExtensions: RESOLVE_EXTENSIONS,
      write: false,
      metafile: true,
      sourcemap: "external",
      sourcesContent: false,
      logLevel: "silent",
      plugins: [externalPackages(requiredExternals), mixedModules(mixedFiles)],
    });
    const js = result.outputFiles.find((f) => !f.path.endsWith(".map"));
    const map = result.outputFiles.find((f) => f.path.endsWith(".map"));
    return {
      code: revealRequires(js?.text ?? "", requiredExternals),
      map: map?.text,
      inputs: Object.keys(result.metafile.inputs).map((f) => path.resolve(workingDir, f)),
      warnings: result.warnings,
    };
  } catch (err) {
    if (!isBuildFailure(err)) throw err;
    return { error: err, warnings: err.warnings };
  }
}

/** `__require("pkg")` → `require("pkg")` for the external specifiers that CommonJS files required. */
function revealRequires(code: string, externals: Set<string>): string {
  return code.replace(/\b__require\((["'])([^"'\\\n]+)\1\)/g, (call, quote: string, spec: string) =>
    externals.has(spec) ? `require(${quote}${spec}${quote})` : call,
  );
}

/**
 * Every import that is not a path (packages with or without `@version`, Node built-ins) stays external.
 * A package imported without a version gets the range of the nearest `package.json` above the importing
 * file (`uuid` → `uuid@^8.3.2`), so the server installs a version that satisfies it rather than the newest.
 */
function externalPackages(requiredExternals: Set<string>): esbuild.Plugin {
  const manifests = new Map<string, Promise<Record<string, string>>>();
  return {
    name: "fount-external-packages",
    setup(build) {
      build.onResolve({ filter: /^[^./\\]/ }, async (args) => {
        if (/^[a-z]:[\\/]/i.test(args.path)) return undefined;
        const spec = args.importer ? await withManifestRange(args.path, args.importer, manifests) : args.path;
        if (args.kind === "require-call") requiredExternals.add(spec);
        return { path: spec, external: true };
      });
    },
  };
}

/** `name[/sub]` as `name@range[/sub]` when the nearest package.json lists the package; else unchanged. */
async function withManifestRange(
  spec: string,
  importer: string,
  manifests: Map<string, Promise<Record<string, string>>>,
): Promise<string> {
  if (spec.startsWith("node:")) return spec;
  const match = /^((?:@[^/@\s]+\/)?[^/@\s]+)(\/.*)?$/.exec(spec);
  if (!match) return spec; // Already versioned (`pkg@1.2.3`), or not a package name.
  const [, name, subpath = ""] = match;
  const range = (await nearestDependencies(path.dirname(importer), manifests))[name as string];
  // Only plain semver ranges: `file:`, `git+…` and URLs mean nothing to the server.
  if (range === undefined || !/^[\w.^~<>=|* +-]+$/.test(range)) return spec;
  return `${name}@${range.trim()}${subpath}`;
}

/** The dependencies of the nearest package.json at or above `dir` (an empty set when there is none). */
function nearestDependencies(
  dir: string,
  cache: Map<string, Promise<Record<string, string>>>,
): Promise<Record<string, string>> {
  let found = cache.get(dir);
  if (!found) {
    found = (async () => {
      try {
        const pkg = JSON.parse(await fs.readFile(path.join(dir, "package.json"), "utf8")) as Record<
          string,
          unknown
        >;
        const deps: Record<string, string> = {};
        for (const field of ["peerDependencies", "optionalDependencies", "dependencies"]) {
          const listed = pkg[field];
          if (listed && typeof listed === "object")
            for (const [k, v] of Object.entries(listed)) if (typeof v === "string") deps[k] = v;
        }
        return deps;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "ENOENT") return {};
        const parent = path.dirname(dir);
        return parent === dir ? {} : nearestDependencies(parent, cache);
      }
    })();
    cache.set(dir, found);
  }
  return found;
}

/**
 * Loads the given files the way esbuild loads an extension-less module that mixes `import` with
 * `module.exports`: the body runs as CommonJS, imports stay imports and `module.exports` becomes the
 * default export. Done through a transform because esbuild forces plain ESM on `.mjs`/`.mts` files.
 */
function mixedModules(files: Set<string>): esbuild.Plugin {
  return {
    name: "fount-mixed-modules",
    setup(build) {
      if (files.size === 0) return;
      build.onLoad({ filter: /.*/ }, async (args) => {
        if (!files.has(args.path)) return undefined;
        const source = await fs.readFile(args.path, "utf8");
        const loader = /\.[mc]?ts$/.test(args.path) ? "ts" : "js";
        const { code } = await esbuild.transform(source, {
          loader,
          format: "esm",
          platform: "node",
          target: "node24",
        });
        return { contents: code, loader: "js" };
      });
    },
  };
}
