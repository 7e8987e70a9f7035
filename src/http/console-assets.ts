/**
 * The console's browser bundle: `console/main.tsx` (Preact) built by esbuild into `dist/console/`
 * (`npm ci` runs it through the `prepare` script). A server started from a tree that was never built
 * builds it once on first use, so a checkout works without the extra step.
 */
import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

/** Where the console's source lives. */
export const consoleSourceDir = fileURLToPath(new URL("../../console/", import.meta.url));
/** Where the built files go (git-ignored). */
export const consoleOutDir = fileURLToPath(new URL("../../dist/console/", import.meta.url));

/** The built console: script and stylesheet, and a version that changes with them (for cache busting). */
export interface ConsoleAssets {
  js: Buffer;
  css: Buffer;
  version: string;
}

/** Bundles and minifies the console into `outDir` (`app.js`, `app.css`). */
export async function buildConsole(outDir: string = consoleOutDir): Promise<void> {
  await esbuild.build({
    entryPoints: { app: `${consoleSourceDir}main.tsx` },
    bundle: true,
    minify: true,
    format: "esm",
    target: "es2022",
    jsx: "automatic",
    jsxImportSource: "preact",
    outdir: outDir,
    logLevel: "silent",
    legalComments: "none",
  });
}

let loading: Promise<ConsoleAssets> | undefined;

async function read(outDir: string): Promise<ConsoleAssets> {
  const [js, css] = await Promise.all([readFile(`${outDir}app.js`), readFile(`${outDir}app.css`)]);
  const version = createHash("sha256").update(js).update(css).digest("hex").slice(0, 12);
  return { js, css, version };
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
