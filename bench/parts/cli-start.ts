/**
 * Start-up of the `fount` CLI: `fount --version` (issue 18 asks for under 300 ms) and `fount help`,
 * which loads every command, against a bare `node -e 0` on the same machine at the same time.
 */
import { execFile } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { type Figure, figure } from "../lib/report.ts";
import { median } from "../lib/stats.ts";
import type { PartContext } from "./context.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const entry = path.join(root, "bin", "fount.mjs");
const runs = 20;

function timed(args: string[]): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    execFile(process.execPath, args, { cwd: root }, (err) =>
      err ? reject(err) : resolve(performance.now() - t0),
    );
  });
}

export async function cliStart(
  ctx: PartContext,
  out: { figures: Figure[]; details: Record<string, unknown> },
) {
  const part = "CLI start";
  ctx.log(`${part}: ${runs} runs each of fount --version, fount help and node -e 0, interleaved`);
  const commands: Record<string, string[]> = {
    version: [entry, "--version"],
    help: [entry, "help"],
    bare: ["-e", "0"],
  };
  // The first runs fill Node's compile cache, as a user's first run does; they are not measured.
  for (const args of Object.values(commands)) await timed(args);
  const samples: Record<string, number[]> = { version: [], help: [], bare: [] };
  // Interleaved, so that the machine's drift weighs on all three alike.
  for (let i = 0; i < runs; i++)
    for (const [name, args] of Object.entries(commands)) samples[name]!.push(await timed(args));
  out.details.cliStartMs = samples;
  const bare = median(samples.bare!);
  out.figures.push(
    figure(
      part,
      "fount --version (median)",
      median(samples.version!),
      "ms",
      { op: "<=", value: 300 },
      `bare node -e 0: ${bare.toFixed(0)} ms`,
    ),
    figure(part, "fount help (median)", median(samples.help!), "ms", undefined, "loads every command"),
  );
}
