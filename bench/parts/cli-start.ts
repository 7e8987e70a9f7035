/**
 * Start-up of the `fount` CLI as a user runs it, on the system's Node (the first `node` on the PATH
 * outside the checkout, or FOUNT_BENCH_CLI_NODE): `fount --version` (issue 30: median at most 200 ms)
 * and `fount help`, which loads every command (at most 300 ms), against a bare `node -e 0` on the same
 * Node at the same time. The CLI bundle must be fresh (`npm run build:cli`), as `npm ci` leaves it.
 */
import { execFile, execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { type Figure, figure } from "../lib/report.ts";
import { median } from "../lib/stats.ts";
import type { PartContext } from "./context.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const entry = path.join(root, "bin", "fount.mjs");
const runs = 20;

/** The Node a user's `fount` runs on: FOUNT_BENCH_CLI_NODE, else the first outside node_modules. */
function userNode(): string {
  if (process.env.FOUNT_BENCH_CLI_NODE) return process.env.FOUNT_BENCH_CLI_NODE;
  for (const dir of (process.env.PATH ?? "").split(path.delimiter)) {
    const candidate = path.join(dir, "node");
    if (dir && !dir.includes("node_modules") && existsSync(candidate)) return candidate;
  }
  return process.execPath;
}

function timed(node: string, args: string[]): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    execFile(node, args, { cwd: root }, (err) => (err ? reject(err) : resolve(performance.now() - t0)));
  });
}

export async function cliStart(
  ctx: PartContext,
  out: { figures: Figure[]; details: Record<string, unknown> },
) {
  const part = "CLI start";
  const node = userNode();
  const version = execFileSync(node, ["--version"], { encoding: "utf8" }).trim();
  ctx.log(
    `${part}: ${runs} runs each of fount --version, fount help and node -e 0 on ${node} (${version}), interleaved`,
  );
  const commands: Record<string, string[]> = {
    version: [entry, "--version"],
    help: [entry, "help"],
    bare: ["-e", "0"],
  };
  // The first runs fill Node's compile cache, as a user's first run does; they are not measured.
  for (const args of Object.values(commands)) await timed(node, args);
  const samples: Record<string, number[]> = { version: [], help: [], bare: [] };
  // Interleaved, so that the machine's drift weighs on all three alike.
  for (let i = 0; i < runs; i++)
    for (const [name, args] of Object.entries(commands)) samples[name]!.push(await timed(node, args));
  out.details.cliStartMs = samples;
  out.details.cliNode = `${node} ${version}`;
  const bare = median(samples.bare!);
  out.figures.push(
    figure(
      part,
      "fount --version (median)",
      median(samples.version!),
      "ms",
      { op: "<=", value: 200 },
      `${version}; bare node -e 0: ${bare.toFixed(0)} ms`,
    ),
    figure(
      part,
      "fount help (median)",
      median(samples.help!),
      "ms",
      { op: "<=", value: 300 },
      "loads every command",
    ),
  );
}
