/**
 * The console's browser bundle: `console/main.tsx` (Preact) built by esbuild into `dist/console/`
 * (`npm ci` runs it through the `prepare` script). A server started from a tree that was never built
 * builds it once on first use, so a checkout works without the extra step.
 */
import { createHash } from "node:crypto";
import { mkdir, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

/** Where the console's source lives. */
export const consoleSourceDir = fileURLToPath(new URL("../../console/", import.meta.url));
/** Where the built files go (git-ignored). */
export const consoleOutDir = fileURLToPath(new URL("../../dist/console/", import.meta.url));

/** The built console: its files by name (`app.js`, `app.css`, lazily loaded `chunk-<hash>.js`), and a version that changes with them (for cache busting). */
export interface ConsoleAssets {
  files: Map<string, Buffer>;
  version: string;
}

/** Bundles and minifies the console into `outDir` (`app.js`, `app.css`). */
export async function buildConsole(outDir: string = consoleOutDir): Promise<void> {
  const result = await esbuild.build({
    write: false,
    entryPoints: { app: `${consoleSourceDir}main.tsx` },
    bundle: true,
    minify: true,
    format: "esm",
    target: "es2022",
    jsx: "automatic",
    jsxImportSource: "preact",
    // What only some pages need (the cron preview's parser) loads when first used, not on the first page.
    splitting: true,
    chunkNames: "chunk-[hash]",
    outdir: outDir,
    logLevel: "silent",
    legalComments: "none",
  });
  // Each file is written beside its place and renamed into it, so a server reading the folder meanwhile
  // (another test process) sees the old file or the new one, never half of one.
  await mkdir(outDir, { recursive: true });
  for (const file of result.outputFiles) {
    const temporary = `${file.path}.${process.pid}.tmp`;
    await writeFile(temporary, file.contents);
    await rename(temporary, file.path);
  }
  // Chunks of earlier builds go: the server reads every file here into memory, and the editor's chunk
  // alone is 430 KB. (Their names are hashes of their content, so a current one is never removed.)
  const current = new Set(result.outputFiles.map((f) => path.basename(f.path)));
  for (const name of await readdir(outDir)) {
    if (/^chunk-\w+\.js$/.test(name) && !current.has(name)) await rm(`${outDir}${name}`, { force: true });
  }
}

let loading: Promise<ConsoleAssets> | undefined;

async function read(outDir: string): Promise<ConsoleAssets> {
  const names = (await readdir(outDir)).filter((n) => /^[\w-]+\.(js|css)$/.test(n)).sort();
  if (!names.includes("app.js") || !names.includes("app.css"))
    throw Object.assign(new Error(`${outDir} holds no built console`), { code: "ENOENT" });
  const files = new Map<string, Buffer>();
  const hash = createHash("sha256");
  for (const name of names) {
    const data = await readFile(`${outDir}${name}`);
    files.set(name, data);
    hash.update(name).update(data);
  }
  return { files, version: hash.digest("hex").slice(0, 12) };
}

/** The built console, read once per process (and built first when the output is missing). */
export function consoleAssets(outDir: string = consoleOutDir): Promise<ConsoleAssets> {
  loading ??= read(outDir).catch(async (err: NodeJS.ErrnoException) => {
    if (err.code !== "ENOENT") throw err;
    await buildConsole(outDir);
    return read(outDir);
  });
  loading.catch(() => {
    loading = undefined;
  });
  return loading;
}
