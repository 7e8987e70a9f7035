/**
 * Whether executors running under uids of their own can reach what they must read: the runner's
 * folder and the data dir (packages, builds, scratch). Folders inside the data dir the pool opens up
 * itself; a folder above it (a root home, a `mktemp -d` folder) that other uids cannot traverse would
 * let the server start and then fail every deployment, so the server refuses to start instead, and
 * /readyz says so if it happens later.
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { ConfigError } from "../config.ts";

const runnerDir = fileURLToPath(new URL("./child/", import.meta.url));

/** The one-line reason executors cannot run, or undefined when they can. */
export function executorAccessProblem(dataDir: string): string | undefined {
  let realData: string;
  try {
    // The data dir may not exist yet: its nearest existing ancestor decides.
    realData = realpathOfExisting(dataDir);
  } catch {
    return undefined;
  }
  const checks: Array<{ what: string; from: string }> = [
    { what: `the data dir ${dataDir}`, from: path.dirname(realData) },
    { what: `Fount's executor code in ${runnerDir}`, from: fs.realpathSync(runnerDir) },
  ];
  for (const { what, from } of checks) {
    for (let d = from; ; d = path.dirname(d)) {
      // A missing folder is made by the server, searchable (mode 0755 under the usual umask).
      const st = fs.statSync(d, { throwIfNoEntry: false });
      if (st && (st.mode & 0o001) === 0) {
        return `executors run under uids of their own and cannot reach ${what}: ${d} is not searchable by other users. Fix: chmod o+x ${d}, or move FOUNT_DATA_DIR (and Fount) out of it, or set FOUNT_EXECUTOR_ISOLATE_USERS=false to run executors under the server's uid`;
      }
      if (d === path.dirname(d)) break;
    }
  }
  return undefined;
}

/** Throws a ConfigError (the server stops with its message) when executors could not run. */
export function assertExecutorAccess(dataDir: string): void {
  const problem = executorAccessProblem(dataDir);
  if (problem) throw new ConfigError(problem);
}

function realpathOfExisting(p: string): string {
  let rest = "";
  for (let d = path.resolve(p); ; d = path.dirname(d)) {
    try {
      return path.join(fs.realpathSync(d), rest);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT" || d === path.dirname(d)) throw err;
      rest = path.join(path.basename(d), rest);
    }
  }
}
