#!/usr/bin/env node
/**
 * The `fount` command line; everything lives in src/cli. This entry is plain JavaScript so that any
 * Node from 20 on starts it, and it runs the CLI in that same process: the plain-JavaScript bundle that
 * `npm ci` builds into dist/cli (scripts/build-cli.ts) while it is newer than its sources, else the
 * TypeScript sources, on a Node that strips types or, on an older one, on the Node that `npm ci` put in
 * the checkout. The admin commands, which open the store with node:sqlite, hand over to that Node too.
 */
import { readFileSync } from "node:fs";
import module from "node:module";
import { fileURLToPath } from "node:url";
import { freshBundle } from "./cli-bundle.mjs";
import { atLeast, runOnBundledNode } from "./node-runtime.mjs";

const args = process.argv.slice(2);

if (args.length === 1 && args[0] === "--version") {
  // Answered before anything else loads, which keeps it quick.
  const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
  process.stdout.write(`fount ${pkg.version}\n`);
} else {
  // Node keeps the compiled modules in its compile cache (in the system's temporary folder, or
  // NODE_COMPILE_CACHE; NODE_DISABLE_COMPILE_CACHE=1 turns it off) for the next run; Node 22.1 and newer.
  module.enableCompileCache?.();
  const bundle = freshBundle();
  if (bundle !== undefined) {
    const { main } = await import(bundle);
    process.exitCode = await main(args);
  } else if (atLeast(process.version)) {
    const { main } = await import("../src/cli/main.ts");
    process.exitCode = await main(args);
  } else {
    try {
      process.exitCode = await runOnBundledNode(fileURLToPath(import.meta.url), args);
    } catch (err) {
      process.stderr.write(`fount: ${err.message}\n`);
      process.exitCode = 1;
    }
  }
}
