/** Runs the `fount` CLI as a separate process, as a user would, with a clean environment. */
import { execFile } from "node:child_process";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../..", import.meta.url));
const nodeBin = path.join(root, "node_modules", ".bin", "node");
const entry = path.join(root, "bin", "fount.ts");

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** A home directory and config path of its own, so that no test reads another's (or the user's) profile. */
export function tempHome(): { home: string; configPath: string } {
  const home = mkdtempSync(path.join(os.tmpdir(), "fount-cli-"));
  return { home, configPath: path.join(home, "config", "fount") };
}

/**
 * Runs `fount <args>`; only PATH, HOME and the given variables reach it. `timeoutMs` (default 20 s)
 * is for commands that wait on the network, like a deploy whose packages the server installs.
 */
export function fount(
  args: string[],
  env: Record<string, string | undefined> = {},
  timeoutMs = 20_000,
): Promise<CliResult> {
  const clean: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: env.HOME ?? os.tmpdir(), ...env };
  for (const key of Object.keys(clean)) if (clean[key] === undefined) delete clean[key];
  return new Promise((resolve) => {
    execFile(
      nodeBin,
      [entry, ...args],
      { cwd: root, env: clean, timeout: timeoutMs },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === "number" ? err.code : -1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}
