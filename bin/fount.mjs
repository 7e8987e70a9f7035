#!/usr/bin/env node
/**
 * The `fount` command line; everything lives in src/cli. This entry is plain JavaScript so that any
 * Node can start it: on one too old for the CLI's TypeScript (a system Node, when `fount` was
 * installed with `npm link`), it hands over to the Node that `npm ci` put in the checkout.
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import module from "node:module";
import { fileURLToPath } from "node:url";

const args = process.argv.slice(2);
const major = Number(process.versions.node.split(".")[0]);

if (major < 24) {
  const local = fileURLToPath(new URL("../node_modules/.bin/node", import.meta.url));
  if (!existsSync(local)) {
    process.stderr.write(
      `fount: needs Node.js 24 or newer; this is ${process.version} (${process.execPath}). Run \`npm ci\` in the Fount checkout, which installs it.\n`,
    );
    process.exit(1);
  }
  const child = spawn(local, [fileURLToPath(import.meta.url), ...args], { stdio: "inherit" });
  // Ctrl-C reaches both processes; the child decides what it means (fount dev cleans up first).
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) process.on(signal, () => child.kill(signal));
  child.on("exit", (code, signal) => process.exit(code ?? (signal === "SIGINT" ? 130 : 1)));
} else {
  // Stripping the types of the CLI's modules and compiling them is most of its start-up time; Node
  // keeps the result in its compile cache (in the system's temporary folder, or NODE_COMPILE_CACHE;
  // NODE_DISABLE_COMPILE_CACHE=1 turns it off) for the next run.
  module.enableCompileCache();
  if (args.length === 1 && args[0] === "--version") {
    // Answered before the commands are loaded, which keeps it quick.
    const { readVersion } = await import("../src/cli/version.ts");
    process.stdout.write(`fount ${readVersion()}\n`);
  } else {
    const { main } = await import("../src/cli/main.ts");
    process.exitCode = await main(args);
  }
}
