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
  return outcome.code ?? "";
}

interface BuildOutcome {
  code?: string;
  error?: esbuild.BuildFailure;
  warnings: esbuild.Message[];
}

async function runBuild(entry: string, workingDir: string, mixedFiles: Set<string>): Promise<BuildOutcome> {
  const requiredExternals = new Set<string>();
  try {
    const result = await esbuild.build({
      entryPoints: [entry],
      absWorkingDir: workingDir,
      bundle: true,
      format: "esm",
      platform: "node",
      target: "node24",
      charset: "utf8",
      resolveExtensions: RESOLVE_EXTENSIONS,
      write: false,
      logLevel: "silent",
      plugins: [externalPackages(requiredExternals), mixedModules(mixedFiles)],
    });
    return { code: revealRequires(result.outputFiles[0].text, requiredExternals), warnings: result.warnings };
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
