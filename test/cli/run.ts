/** Runs the `fount` CLI as a separate process, as a user would, with a clean environment. */
import assert from "node:assert/strict";
import { type ChildProcess, execFile, execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../..", import.meta.url));
const nodeBin = path.join(root, "node_modules", ".bin", "node");
const entry = path.join(root, "bin", "fount.mjs");
/** Node's compile cache, when the test run has one (package.json `test:unit`): it changes no output. */
const compileCache = process.env.NODE_COMPILE_CACHE
  ? { NODE_COMPILE_CACHE: process.env.NODE_COMPILE_CACHE }
  : {};

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
  const clean: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: env.HOME ?? os.tmpdir(),
    ...compileCache,
    ...env,
  };
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

/** `fount <args> --json`, which must succeed (a deploy may take long on a loaded machine); its parsed stdout. */
export async function fountJson(env: Record<string, string>, ...args: string[]): Promise<any> {
  const res = await fount([...args, "--json"], env, 60_000);
  assert.equal(res.code, 0, `fount ${args.join(" ")}: ${res.stderr}`);
  return JSON.parse(res.stdout);
}

/** A `fount` process left running (following commands, `fount dev`), with its output as it arrives. */
export class RunningFount {
  readonly proc: ChildProcess;
  stdout = "";
  stderr = "";
  readonly exited: Promise<number | null>;

  constructor(env: Record<string, string>, args: string[], cwd = root) {
    this.proc = spawn(nodeBin, [entry, ...args], {
      cwd,
      env: { PATH: process.env.PATH, HOME: os.tmpdir(), ...compileCache, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    this.proc.stdout!.on("data", (c: Buffer) => (this.stdout += c.toString()));
    this.proc.stderr!.on("data", (c: Buffer) => (this.stderr += c.toString()));
    this.exited = new Promise((resolve) => this.proc.on("exit", (code) => resolve(code)));
  }

  /**
   * Waits until `pattern` shows in stdout or stderr, in the output after character `from` (checked as
   * output arrives, 60 s at most: a loaded machine may take long to build and deploy).
   */
  async waitFor(pattern: RegExp, where: "stdout" | "stderr" = "stdout", from = 0): Promise<string> {
    const deadline = Date.now() + 60_000;
    for (;;) {
      const match = pattern.exec(this[where].slice(from));
      if (match) return match[0];
      if (Date.now() > deadline || this.proc.exitCode !== null)
        assert.fail(`no ${pattern} in ${where}; stdout: ${this.stdout}\nstderr: ${this.stderr}`);
      const stream = this.proc[where]!;
      await new Promise((resolve) => {
        const done = () => {
          clearTimeout(timer);
          // Both listeners go: a wait per chunk of output left a close listener each before.
          stream.off("data", done).off("close", done);
          resolve(undefined);
        };
        const timer = setTimeout(done, Math.max(0, deadline - Date.now()) + 10);
        stream.once("data", done).once("close", done);
      });
    }
  }

  /** Sends `signal` (SIGTERM by default) and resolves to the exit code. */
  async stop(signal: NodeJS.Signals = "SIGTERM"): Promise<number | null> {
    this.proc.kill(signal);
    return this.exited;
  }
}

/**
 * A Node from 20 to 23 on the PATH other than the checkout's (the system's, as `fount` meets it after
 * `npm link`), or undefined when there is none.
 */
export function olderNode(): string | undefined {
  for (const dir of (process.env.PATH ?? "").split(path.delimiter)) {
    if (dir === "" || dir.includes("node_modules")) continue;
    const candidate = path.join(dir, "node");
    if (!existsSync(candidate)) continue;
    const version = execFileSync(candidate, ["--version"], { encoding: "utf8" }).trim();
    const major = Number(/^v(\d+)\./.exec(version)?.[1]);
    if (major >= 20 && major < 24) return candidate;
  }
  return undefined;
}

/** Runs `node <args>` with the given Node binary; resolves to its exit code and output. */
export function runNode(
  node: string,
  args: string[],
  env: Record<string, string | undefined> = {},
): Promise<CliResult> {
  const clean: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: os.tmpdir(), ...compileCache, ...env };
  return new Promise((resolve) => {
    execFile(node, args, { cwd: root, env: clean, timeout: 60_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === "number" ? err.code : -1) : 0, stdout, stderr });
    });
  });
}

/** Whether util-linux `script`, which gives a command a terminal, is here. */
export const hasScript = existsSync("/usr/bin/script");

/**
 * Runs `fount <args>` on a terminal of its own (util-linux `script`), as a person at a keyboard would;
 * each `[pattern, keys]` step types `keys` once `pattern` shows on the screen. Resolves to the exit code
 * and everything the terminal showed, colours and cursor moves left out.
 */
export function onTerminal(
  args: string[],
  env: Record<string, string>,
  steps: Array<[RegExp, string]>,
  cwd = root,
): Promise<{ code: number | null; screen: string }> {
  const quote = (s: string) => `'${s.replace(/'/g, "'\\''")}'`;
  const command = [nodeBin, entry, ...args].map(quote).join(" ");
  const proc = spawn("/usr/bin/script", ["-qefc", command, "/dev/null"], {
    cwd,
    env: { PATH: process.env.PATH, HOME: os.tmpdir(), TERM: "xterm", ...env },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let screen = "";
  let step = 0;
  // biome-ignore lint/suspicious/noControlCharactersInRegex: terminal escape sequences are what it removes
  const plainText = (text: string) => text.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, "");
  const feed = () => {
    while (step < steps.length && steps[step]![0].test(screen)) proc.stdin.write(steps[step++]![1]);
  };
  proc.stdout.on("data", (c: Buffer) => {
    screen += plainText(c.toString());
    feed();
  });
  proc.stderr.on("data", (c: Buffer) => (screen += plainText(c.toString())));
  const timer = setTimeout(() => proc.kill("SIGKILL"), 60_000);
  return new Promise((resolve) =>
    proc.on("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, screen });
    }),
  );
}
