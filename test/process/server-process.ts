/** Runs Fount as a user does (`node src/main.ts` or `npm start`) with its own env, and watches its output. */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after } from "node:test";
import { fileURLToPath } from "node:url";
import { unmountScratchUnder } from "../helpers.ts";

export const repoRoot = fileURLToPath(new URL("../../", import.meta.url));
/** Starting includes building the registry's components; a loaded machine may take a while. */
export const START_TIMEOUT_MS = 90_000;

export interface ServerProcess {
  proc: ChildProcess;
  /** All stdout and stderr so far. */
  output(): string;
  /** Resolves with the first match of `pattern` in the output, or rejects when the process ends first or after `timeoutMs`. */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<RegExpMatchArray>;
  /** The server's base URL, once it listens. */
  url(): Promise<string>;
  /** The pid of the node process that runs src/main.ts (under npm it is not `proc`). */
  serverPid(): Promise<number>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Ends the process tree if still running (SIGKILL to the server and to `proc`). */
  kill(): Promise<void>;
}

/**
 * `terminal`: `node src/main.ts` with a terminal for its stdout (util-linux `script` gives it a pty), as
 * when a person starts it by hand; the output read here is what that terminal shows.
 */
export function startProcess(
  env: NodeJS.ProcessEnv,
  how: "node" | "npm" | "terminal" = "node",
): ServerProcess {
  const [cmd, args] =
    how === "npm"
      ? ["npm", ["start"]]
      : how === "terminal"
        ? ["script", ["--quiet", "--return", "--command", `${process.execPath} src/main.ts`, "/dev/null"]]
        : [process.execPath, ["src/main.ts"]];
  const proc = spawn(cmd, args, {
    cwd: repoRoot,
    env: { ...process.env, FOUNT_RATE_LIMIT: "0", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let text = "";
  const listeners = new Set<() => void>();
  const onData = (chunk: Buffer) => {
    text += chunk.toString("utf8");
    for (const l of listeners) l();
  };
  proc.stdout!.on("data", onData);
  proc.stderr!.on("data", onData);
  let ended = false;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    proc.on("close", (code, signal) => {
      ended = true;
      for (const l of listeners) l();
      resolve({ code, signal });
    });
  });
  const waitFor = (pattern: RegExp, timeoutMs = START_TIMEOUT_MS) =>
    new Promise<RegExpMatchArray>((resolve, reject) => {
      const check = () => {
        const m = text.match(pattern);
        if (m) done(() => resolve(m));
        else if (ended) done(() => reject(new Error(`the process ended before ${pattern}:\n${text}`)));
      };
      const timer = setTimeout(
        () => done(() => reject(new Error(`no ${pattern} within ${timeoutMs} ms:\n${text}`))),
        timeoutMs,
      );
      const done = (fn: () => void) => {
        clearTimeout(timer);
        listeners.delete(check);
        fn();
      };
      listeners.add(check);
      check();
    });
  // Under `node` the server is `proc`. Under npm (or script) it is a child, which names itself in its data
  // dir's lock (src/file-lock.ts): the start prints no line with its pid (nothing at LOG_LEVEL=warn).
  const lockFile = path.join(env.FOUNT_DATA_DIR ?? path.join(repoRoot, ".fount"), "server.lock.json");
  const lockedPid = (): number | undefined => {
    try {
      return (JSON.parse(readFileSync(lockFile, "utf8")) as { pid: number }).pid;
    } catch {
      return undefined;
    }
  };
  const serverPid = async () => {
    if (how === "node") return proc.pid!;
    await waitFor(/^Fount is listening on /m);
    return lockedPid()!;
  };
  return {
    proc,
    output: () => text,
    waitFor,
    // Fastify logs "Server listening" before the admin of a first start is made; Fount's own line comes
    // after it, so a request sent then finds the bootstrap key.
    url: async () => {
      await waitFor(/^Fount is listening on /m);
      return (await waitFor(/Server listening at (http:\/\/127\.0\.0\.1:\d+)/))[1]!;
    },
    serverPid,
    exited,
    kill: async () => {
      const pid = how === "node" ? proc.pid : lockedPid();
      if (pid !== undefined && pid !== proc.pid && alive(pid)) process.kill(pid, "SIGKILL");
      if (!ended) {
        proc.kill("SIGKILL");
        // A grandchild that inherited a pipe could hold "close" back; the exit is what matters here.
        await Promise.race([exited, new Promise((r) => setTimeout(r, 5000).unref())]);
      }
    },
  };
}

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Resolves once `pid` is gone, or rejects after `timeoutMs`. */
export async function gone(pid: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (alive(pid)) {
    if (Date.now() > deadline) throw new Error(`process ${pid} still runs after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * The servers and data dirs of one test file: after its tests each server still in `running` is killed
 * and each dir made by `tempDir` removed (its scratch mounts first).
 */
export function processCleanup(prefix: string): { running: Set<ServerProcess>; tempDir: () => string } {
  const running = new Set<ServerProcess>();
  const dirs: string[] = [];
  after(async () => {
    for (const p of running) await p.kill();
    for (const d of dirs) {
      unmountScratchUnder(d);
      rmSync(d, { recursive: true, force: true });
    }
  });
  const tempDir = () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
    dirs.push(dir);
    return dir;
  };
  return { running, tempDir };
}
