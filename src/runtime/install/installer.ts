/**
 * Runs version resolution and package installs in processes of their own (child.ts), so that a big
 * dependency tree never holds the server's event loop or heap: at most `concurrency` such processes at
 * once, each with a V8 heap cap, a minimal environment, a lower CPU priority and its caller's deadline,
 * past which it is killed. Each process gets an npm cache folder of its own, removed when it exits: one
 * shared cache kept every tarball and packument ever fetched. See docs/runtime-build.md.
 */
import { type ChildProcess, fork } from "node:child_process";
import { randomBytes } from "node:crypto";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { InstallError, InstallReply, InstallRequest, NpmOptions } from "./protocol.ts";
import { Slots } from "./slots.ts";

/** Bounds of the install processes; one installer serves the whole server. */
export interface InstallerOptions {
  /** Install processes running at once; further builds wait within their deadline. */
  concurrency: number;
  /** V8 heap cap (`--max-old-space-size`) of each install process, MiB. */
  memoryMb: number;
  /** Largest installed package set on disk, MiB; a bigger one fails and is removed. */
  maxMb: number;
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
// cacache's folders in a cache root, from before each install process had a folder of its own there:
// the shared cache that was never cleaned.
const SHARED_CACHE = /^(?:content-v2|index-v5|tmp|CACHEDIR\.TAG)$/;
// An install process's cache folder older than this is a crashed server's (a process lasts its deadline,
// 120 s by default); younger ones may be another server's on the same cache root, still installing.
const STALE_JOB_MS = 60 * 60_000;

/** Starts install processes within the server's bounds. */
export class PackageInstaller {
  readonly #slots: Slots;
  readonly #memoryMb: number;
  readonly #maxBytes: number;
  /** Cache roots cleared of what processes of earlier runs left, once per root. */
  readonly #cleared = new Map<string, Promise<void>>();

  constructor(options: InstallerOptions) {
    this.#slots = new Slots(options.concurrency);
    this.#memoryMb = options.memoryMb;
    this.#maxBytes = options.maxMb * 2 ** 20;
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
    const release = await this.#slots.acquire(deadline, () =>
      timeoutError("timed out waiting for other installs to finish"),
    );
    const root = typeof request.npm.cache === "string" ? request.npm.cache : undefined;
    const cache = root && path.join(root, `job-${randomBytes(6).toString("hex")}`);
    try {
      if (root) await this.#clear(root);
      const own: InstallRequest = cache ? { ...request, npm: { ...request.npm, cache } } : request;
      await runProcess(own, { deadline, timeoutMessage, memoryMb: this.#memoryMb }, onReply);
    } finally {
      // The process has exited (runProcess settles on its close): nothing writes into the folder any more.
      if (cache) await fs.rm(cache, { recursive: true, force: true });
      release();
    }
  }

  /** Removes the per-process folders a crash left in `root`, and the old shared cache, at the first install. */
  #clear(root: string): Promise<void> {
    let cleared = this.#cleared.get(root);
    if (!cleared) {
      cleared = clearCacheRoot(root);
      this.#cleared.set(root, cleared);
    }
    return cleared;
  }
}

async function clearCacheRoot(root: string): Promise<void> {
  let names: string[];
  try {
    names = await fs.readdir(root);
  } catch {
    return;
  }
  for (const name of names) {
    const file = path.join(root, name);
    const job = /^job-[0-9a-f]+$/.test(name) ? await fs.stat(file).catch(() => undefined) : undefined;
    const stale = job !== undefined && Date.now() - job.mtimeMs > STALE_JOB_MS;
    if (stale || SHARED_CACHE.test(name)) await fs.rm(file, { recursive: true, force: true });
  }
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
