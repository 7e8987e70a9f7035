/**
 * `npm run build:cli` (and `prepare`, so `npm ci` runs it): bundles the CLI (`src/cli/main.ts` and what it
 * imports) into plain JavaScript in `dist/cli/`, which any Node from 20 on runs in one process, with no
 * type stripping and no second Node: `bin/fount.mjs` loads it while it is newer than its sources
 * (`dist/cli/inputs.json` lists them) and runs the TypeScript sources otherwise.
 *
 * Packages stay imports (esbuild is loaded only by the commands that bundle), and so do the server's
 * modules that the admin commands load on use (`import("../app.ts")`): they stay TypeScript, which only
 * the server's Node runs, and the admin commands hand over to it (see `src/cli/node-handover.ts`).
 * Code splitting keeps every dynamic import lazy, so `fount --help` loads one file.
 */
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const root = fileURLToPath(new URL("..", import.meta.url));
const cliDir = path.join(root, "src", "cli");
const outDir = path.join(root, "dist", "cli");

const serverModulesStayExternal: esbuild.Plugin = {
  name: "server-modules-stay-external",
  setup(build) {
    build.onResolve({ filter: /^\.\.?\// }, (args) => {
      if (args.kind !== "dynamic-import") return undefined;
      const target = path.resolve(args.resolveDir, args.path);
      if (target.startsWith(cliDir + path.sep)) return undefined;
      // Every output file sits in outDir (no chunk folder), so one relative path serves them all.
      return { path: path.relative(outDir, target).split(path.sep).join("/"), external: true };
    });
  },
};

rmSync(outDir, { recursive: true, force: true });
mkdirSync(outDir, { recursive: true });
const result = await esbuild.build({
  entryPoints: { main: path.join(cliDir, "main.ts") },
  outdir: outDir,
  bundle: true,
  splitting: true,
  format: "esm",
  platform: "node",
  // The oldest Node that `fount` supports for its client commands.
  target: "node20",
  packages: "external",
  chunkNames: "[name]-[hash]",
  outExtension: { ".js": ".mjs" },
  metafile: true,
  logLevel: "warning",
  plugins: [serverModulesStayExternal],
});
const inputs = Object.keys(result.metafile.inputs).map((p) =>
  path.relative(root, path.resolve(process.cwd(), p)),
);
writeFileSync(path.join(outDir, "inputs.json"), `${JSON.stringify(inputs)}\n`);
console.log(`CLI built into ${path.relative(root, outDir)}/ from ${inputs.length} modules`);
