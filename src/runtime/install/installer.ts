/**
 * Runs version resolution and package installs in processes of their own (child.ts), so that a big
 * dependency tree never holds the server's event loop or heap: at most `concurrency` such processes at
 * once, each with a V8 heap cap, a minimal environment, a lower CPU priority and its caller's deadline,
 * past which it is killed. They share one npm cache, emptied when it has grown past `cacheMaxMb` and
 * none of this server's installs runs: before, it kept every tarball and packument ever fetched. See
 * docs/runtime-build.md.
 */
import { type ChildProcess, fork } from "node:child_process";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Turns } from "../../turns.ts";
import type { InstallError, InstallReply, InstallRequest, NpmOptions } from "./protocol.ts";

/** Bounds of the install processes; one installer serves the whole server. */
export interface InstallerOptions {
  /** Install processes running at once; further builds wait within their deadline. */
  concurrency: number;
  /** V8 heap cap (`--max-old-space-size`) of each install process, MiB. */
  memoryMb: number;
  /** Largest installed package set on disk, MiB; a bigger one fails and is removed. */
  maxMb: number;
  /** The npm cache is emptied once it holds more than this, MiB (0: after every install). */
  cacheMaxMb: number;
}

/** An install error as npm gave it, or one of the process's own (timeout, crash, size). */
export type InstallFailure = Error & { code?: string; pkgid?: string };

/** The outcome of resolving one spec. */
export type Resolution =
  | { version: string; error?: undefined }
  | { version?: undefined; error: InstallFailure };

// On a host short of cores the server's requests and deliveries come first; an install has its deadline.
const INSTALL_NICE = 10;
// Enough of the end of stderr to find V8's out-of-memory report.
const STDERR_TAIL = 8 * 1024;
// Proxy and CA settings reach the registry as they would for npm; nothing else of the server's
// environment (database URL, API keys) is any business of an install, so none of it is passed.
const PASSED_ENV =
  /^(?:https?_proxy|no_proxy|proxy|NODE_EXTRA_CA_CERTS|NODE_USE_ENV_PROXY|SSL_CERT_(?:FILE|DIR)|TMPDIR)$/i;

/** Starts install processes within the server's bounds. */
export class PackageInstaller {
  /** Install processes at once (`concurrency`); the others wait, up to their deadline. */
  readonly #slots: Turns;
  readonly #memoryMb: number;
  readonly #maxBytes: number;
  readonly #cacheMaxBytes: number;
  /** Install processes of this server running now (the cache is emptied only when none is). */
  #running = 0;
  /** A look at the cache's size under way, which later installs' ends do not start again. */
  #trimming: Promise<void> | undefined;

  constructor(options: InstallerOptions) {
    this.#slots = new Turns(options.concurrency);
    this.#memoryMb = options.memoryMb;
    this.#maxBytes = options.maxMb * 2 ** 20;
    this.#cacheMaxBytes = options.cacheMaxMb * 2 ** 20;
  }

  /** The exact version of each `name@range` spec, or why it has none, in the order given. */
  async resolve(specs: string[], npm: NpmOptions, deadline: number): Promise<Resolution[]> {
    const results: Array<Resolution | undefined> = [];
    const onReply = (reply: InstallReply) => {
      if (reply.type !== "resolved") return;
      results[reply.index] =
        reply.version === undefined ? { error: failure(reply.error) } : { version: reply.version };
    };
    const request: InstallRequest = { op: "resolve", specs, npm };
    const stopped = await this.#run(request, deadline, "timed out resolving the version", onReply).then(
      () => undefined,
      (err: InstallFailure) => err,
    );
    return specs.map((_, i) => results[i] ?? { error: stopped ?? noAnswer() });
  }

  /** Installs `dir/package.json`'s dependencies into `dir`; rejects with npm's error or the process's. */
  async install(dir: string, npm: NpmOptions, deadline: number): Promise<void> {
    let outcome: InstallReply | undefined;
    const request: InstallRequest = { op: "install", dir, maxBytes: this.#maxBytes, npm };
    await this.#run(request, deadline, "timed out installing", (reply) => {
      if (reply.type === "installed") outcome = reply;
    });
    if (!outcome) throw noAnswer();
    if (outcome.error) throw failure(outcome.error);
  }

  async #run(
    request: InstallRequest,
    deadline: number,
    timeoutMessage: string,
    onReply: (reply: InstallReply) => void,
  ): Promise<void> {
    const release = await this.#slots.take(deadline - Date.now());
    if (!release) throw timeoutError("timed out waiting for other installs to finish");
    this.#running++;
    try {
      await runProcess(request, { deadline, timeoutMessage, memoryMb: this.#memoryMb }, onReply);
    } finally {
      this.#running--;
      release();
    }
    const cache = request.npm.cache;
    // The process has exited (runProcess settles on its close): it writes nothing into the cache any more.
    // The look runs on after the answer, so that no deploy waits for it.
    if (typeof cache === "string" && this.#running === 0) this.#trimming ??= this.#trim(cache);
  }

  /**
   * Empties the npm cache when it holds more than `cacheMaxBytes` and no install of this server runs:
   * what the next installs need is fetched again. Another server sharing the cache folder (a setting) may
   * then miss what it had just fetched, which npm fetches again.
   */
  async #trim(cache: string): Promise<void> {
    try {
      if ((await bytesUnder(cache, this.#cacheMaxBytes)) <= this.#cacheMaxBytes) return;
      if (this.#running > 0) return;
      for (const name of await fs.readdir(cache))
        await fs.rm(path.join(cache, name), { recursive: true, force: true });
    } catch {
      // A cache that cannot be read or emptied now is looked at again after the next install.
    } finally {
      this.#trimming = undefined;
    }
  }
}

/** Bytes of the files under `dir`, counted until they pass `enough` (then that sum is answered). */
async function bytesUnder(dir: string, enough: number): Promise<number> {
  let total = 0;
  const pending = [dir];
  while (pending.length > 0 && total <= enough) {
    const at = pending.pop()!;
    for (const entry of await fs.readdir(at, { withFileTypes: true }).catch(() => [])) {
      const file = path.join(at, entry.name);
      if (entry.isDirectory()) pending.push(file);
      else if (entry.isFile()) total += (await fs.stat(file).catch(() => undefined))?.size ?? 0;
    }
  }
  return total;
}

/**
 * Forks child.ts with `request` and settles once the process has exited, so that a caller removing its
 * folder never races a process still writing into it. Past the deadline the process is killed.
 */
function runProcess(
  request: InstallRequest,
  limits: { deadline: number; timeoutMessage: string; memoryMb: number },
  onReply: (reply: InstallReply) => void,
): Promise<void> {
  return new Promise((resolve, reject) => {
    let child: ChildProcess;
    try {
      child = forkInstaller(limits.memoryMb);
    } catch (err) {
      return reject(err);
    }
    let stderr = "";
    let timedOut = false;
    let spawnError: Error | undefined;
    child.stderr?.on("data", (chunk: Buffer) => {
      stderr = (stderr + chunk.toString("utf8")).slice(-STDERR_TAIL);
    });
    const timer = setTimeout(
      () => {
        timedOut = true;
        child.kill("SIGKILL");
      },
      Math.max(0, limits.deadline - Date.now()),
    );
    child.on("message", (reply) => onReply(reply as InstallReply));
    child.on("error", (err) => {
      spawnError ??= err;
      // A process that never started has no close event to wait for.
      if (child.pid === undefined) {
        clearTimeout(timer);
        reject(err);
      }
    });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      if (timedOut) reject(timeoutError(limits.timeoutMessage));
      else if (code === 0) resolve();
      else reject(spawnError ?? crashError(code, signal, stderr, limits.memoryMb));
    });
    child.send(request);
  });
}

function forkInstaller(memoryMb: number): ChildProcess {
  // Beside this file in every checkout: the server runs its TypeScript as it is, and so does the child.
  const entry = fileURLToPath(new URL("./child.ts", import.meta.url));
  const child = fork(entry, [], {
    execPath: process.execPath,
    execArgv: [`--max-old-space-size=${memoryMb}`],
    env: Object.fromEntries(Object.entries(process.env).filter(([name]) => PASSED_ENV.test(name))),
    serialization: "json",
    stdio: ["ignore", "ignore", "pipe", "ipc"],
  });
  try {
    if (child.pid !== undefined) os.setPriority(child.pid, Math.min(19, os.getPriority() + INSTALL_NICE));
  } catch {
    // The process may be gone already; its close event reports why.
  }
  return child;
}

function failure(error: InstallError | undefined): InstallFailure {
  if (!error) return noAnswer();
  return Object.assign(new Error(error.message), {
    ...(error.code ? { code: error.code } : {}),
    ...(error.pkgid ? { pkgid: error.pkgid } : {}),
  });
}

function timeoutError(message: string): InstallFailure {
  return Object.assign(new Error(message), { code: "ETIMEDOUT" });
}

function noAnswer(): InstallFailure {
  return Object.assign(new Error("the install process gave no answer"), { code: "EINSTALLPROCESS" });
}

function crashError(
  code: number | null,
  signal: NodeJS.Signals | null,
  stderr: string,
  memoryMb: number,
): InstallFailure {
  const message = /heap out of memory|Reached heap limit/i.test(stderr)
    ? `the install ran out of memory (its limit is ${memoryMb} MiB)`
    : `the install process stopped (${signal ?? `exit code ${code}`})`;
  return Object.assign(new Error(message), { code: "EINSTALLPROCESS" });
}
