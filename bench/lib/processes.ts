/**
 * The processes a bench part runs: a Fount server (`src/main.ts`, its own data dir and port) and small
 * helper children (baseline server, webhook receiver, SSE clients) that talk to the bench over IPC.
 * Every wait has a timeout, and every process is stopped by the part that started it.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import {
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { createServer } from "node:net";
import os from "node:os";
import path from "node:path";
import { joinGroup } from "./cgroups.ts";
import { type HttpAnswer, httpCall } from "./http-client.ts";

export const repoRoot = path.resolve(import.meta.dirname, "..", "..");

/** The pinned Node of the project (the system one may be older and unable to run TypeScript). */
export const nodeBin = existsSync(path.join(repoRoot, "node_modules/.bin/node"))
  ? path.join(repoRoot, "node_modules/.bin/node")
  : process.execPath;

/** The admin key of every bench server (a fresh store each time, so the key is only ever local). */
export const benchApiKey = "fnt_benchadminkey000000000000000000";

/** A port free right now (the kernel's pick); the server that is handed it binds it a moment later. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}

/**
 * Makes the server under test, and the executors it forks later (they inherit it), the kernel's first
 * choice when the machine runs out of memory, before the bench itself or PostgreSQL: a bench killed
 * that way leaves its servers running and reports nothing. Only root may raise it past its parent's;
 * otherwise the kernel's own choice stands.
 */
function killedFirst(pid: number): void {
  try {
    writeFileSync(`/proc/${pid}/oom_score_adj`, "800");
  } catch {
    // Not root, or the process is gone already.
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Rejects with `what` timed out when `promise` takes longer than `ms`. */
export async function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function stopProcess(child: ChildProcess, graceMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const kill = setTimeout(() => child.kill("SIGKILL"), graceMs);
    child.once("exit", () => {
      clearTimeout(kill);
      resolve();
    });
    child.kill("SIGTERM");
  });
}

/** A helper child (bench/children/*.ts) that answers requests `{id, type, ...}` with `{id, ...}` over IPC. */
export class HelperChild {
  readonly process: ChildProcess;
  readonly #pending = new Map<number, { resolve: (v: any) => void; reject: (e: Error) => void }>();
  readonly #stderr: string[] = [];
  #nextId = 1;
  #exited: string | undefined;

  private constructor(script: string, args: string[]) {
    this.process = spawn(nodeBin, [path.join(repoRoot, "bench/children", script), ...args], {
      stdio: ["ignore", "inherit", "pipe", "ipc"],
      cwd: repoRoot,
    });
    this.process.stderr!.setEncoding("utf8").on("data", (s: string) => {
      this.#stderr.push(s);
      if (this.#stderr.length > 50) this.#stderr.shift();
    });
    this.process.on("message", (m: { id?: number; error?: string }) => {
      const waiter = m.id !== undefined ? this.#pending.get(m.id) : undefined;
      if (!waiter) return;
      this.#pending.delete(m.id!);
      if (m.error) waiter.reject(new Error(m.error));
      else waiter.resolve(m);
    });
    this.process.on("exit", (code, signal) => {
      this.#exited = `${script} exited (${signal ?? code}): ${this.#stderr.join("").slice(-500)}`;
      for (const w of this.#pending.values()) w.reject(new Error(this.#exited));
      this.#pending.clear();
    });
  }

  /** Starts `script` and waits for its `ready` answer. */
  static async start(script: string, args: string[] = [], timeoutMs = 15_000): Promise<HelperChild> {
    const child = new HelperChild(script, args);
    try {
      await child.call("ready", {}, timeoutMs);
    } catch (err) {
      await child.stop();
      throw err;
    }
    return child;
  }

  get pid(): number {
    return this.process.pid ?? -1;
  }

  call<T = any>(type: string, payload: Record<string, unknown> = {}, timeoutMs = 15_000): Promise<T> {
    if (this.#exited) return Promise.reject(new Error(this.#exited));
    const id = this.#nextId++;
    const answer = new Promise<T>((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.process.send({ id, type, ...payload });
    });
    return withTimeout(answer, timeoutMs, `${type} of a helper child`).finally(() =>
      this.#pending.delete(id),
    );
  }

  stop(): Promise<void> {
    return stopProcess(this.process, 3_000);
  }
}

export interface FountOptions {
  /** Extra arguments for node before the script (`--cpu-prof`, …). */
  nodeArgs?: string[];
  env?: Record<string, string>;
  /** Checkout whose `src/main.ts` runs (another worktree, for `bench/compare.ts`); this one by default. */
  root?: string;
  /** A cgroup (v1 `cpu`, bench/lib/cgroups.ts) the server runs in from its start, with its executors. */
  cgroup?: string;
}

/**
 * Lazily unmounts what is mounted below `dir`: the executors' scratch tmpfs folders, which a server
 * killed after its grace period (a slow stop on a loaded machine) leaves mounted, so the data dir could
 * not be removed and the mounts would pile up.
 */
function unmountUnder(dir: string): void {
  let prefix: string;
  let mounts: string;
  try {
    prefix = `${realpathSync(dir)}/`;
    mounts = readFileSync("/proc/self/mounts", "utf8");
  } catch {
    return;
  }
  const points = mounts
    .split("\n")
    .map((line) => line.split(" ")[1] ?? "")
    .filter((point) => point.startsWith(prefix))
    // Deepest first, should mounts nest.
    .sort((a, b) => b.length - a.length);
  for (const point of points) {
    try {
      execFileSync("umount", ["-l", point], { stdio: "ignore" });
    } catch {
      // Not allowed, or gone already: the removal below says so if it matters.
    }
  }
}

/** A Fount server in its own process with a fresh data dir in a temp dir (and its SQLite store unless DATABASE_URL is set). */
export class FountProcess {
  readonly url: string;
  /**
   * The base URL of its endpoint listener (`FOUNT_ENDPOINT_PORT`): a source's endpoint on this node is
   * `${endpoints}/e/<id>`. A checkout from before endpoints had their own origin serves them at `url`;
   * the `endpointUrl` a deploy answers is right for both.
   */
  readonly endpoints: string;
  readonly dataDir: string;
  /** The server's PostgreSQL store (with its schema), unset when it runs on SQLite. */
  readonly databaseUrl: string | undefined;
  readonly process: ChildProcess;
  readonly #output: string[] = [];

  private constructor(
    url: string,
    endpoints: string,
    dataDir: string,
    child: ChildProcess,
    databaseUrl: string | undefined,
  ) {
    this.url = url;
    this.endpoints = endpoints;
    this.dataDir = dataDir;
    this.databaseUrl = databaseUrl;
    this.process = child;
    for (const stream of [child.stdout!, child.stderr!]) {
      stream.setEncoding("utf8").on("data", (s: string) => {
        this.#output.push(s);
        if (this.#output.length > 50) this.#output.shift();
      });
    }
  }

  static async start(options: FountOptions = {}): Promise<FountProcess> {
    const port = await freePort();
    // Each probe's port is free again once it answers: two in a row can be the same one.
    let endpointPort = await freePort();
    while (endpointPort === port) endpointPort = await freePort();
    const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-bench-"));
    const root = options.root ?? repoRoot;
    const child = spawn(nodeBin, [...(options.nodeArgs ?? []), path.join(root, "src/main.ts")], {
      cwd: root,
      stdio: ["ignore", "pipe", "pipe"],
      env: {
        ...process.env,
        HOST: "127.0.0.1",
        PORT: String(port),
        PUBLIC_URL: `http://127.0.0.1:${port}`,
        FOUNT_ENDPOINT_PORT: String(endpointPort),
        FOUNT_DATA_DIR: dataDir,
        FOUNT_BOOTSTRAP_API_KEY: benchApiKey,
        LOG_LEVEL: "warn",
        FOUNT_RATE_LIMIT: "0",
        FOUNT_WEBHOOK_ALLOW_PRIVATE: "true",
        ...options.env,
      },
    });
    // Before it loads anything: the executors it starts later are in the group too.
    if (options.cgroup && child.pid !== undefined) joinGroup(options.cgroup, child.pid);
    if (child.pid !== undefined) killedFirst(child.pid);
    const server = new FountProcess(
      `http://127.0.0.1:${port}`,
      `http://127.0.0.1:${endpointPort}`,
      dataDir,
      child,
      options.env?.DATABASE_URL,
    );
    try {
      await withTimeout(server.#ready(), 30_000, "Fount start");
    } catch (err) {
      await server.stop();
      throw new Error(`${(err as Error).message}; output: ${server.output().slice(-800)}`);
    }
    return server;
  }

  async #ready(): Promise<void> {
    for (;;) {
      if (this.process.exitCode !== null) throw new Error(`Fount exited with ${this.process.exitCode}`);
      try {
        const res = await httpCall(`${this.url}/readyz`, { timeoutMs: 1_000 });
        if (res.status === 200) return;
      } catch {
        // Not listening yet.
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  get pid(): number {
    return this.process.pid ?? -1;
  }

  output(): string {
    return this.#output.join("");
  }

  /** Calls the API as the admin; throws unless the answer is 2xx. */
  async api(method: string, p: string, body?: unknown, timeoutMs = 30_000): Promise<any> {
    const res = await this.apiRaw(method, p, body, timeoutMs);
    if (res.status < 200 || res.status >= 300) {
      throw new Error(`${method} ${p} answered ${res.status}: ${res.text.slice(0, 300)}`);
    }
    return res.json;
  }

  apiRaw(method: string, p: string, body?: unknown, timeoutMs = 30_000): Promise<HttpAnswer> {
    return httpCall(this.url + p, {
      method,
      headers: { authorization: `Bearer ${benchApiKey}` },
      json: body,
      timeoutMs,
    });
  }

  /** Deploys `code` as a new source; returns its id and endpoint URL. */
  async deploy(code: string, name: string): Promise<{ id: string; endpointUrl: string }> {
    const res = await this.api("POST", "/v1/sources", { component_code: code, name });
    return { id: res.data.id, endpointUrl: res.data.endpoint_url };
  }

  /** Invocations committed this month by the admin (the usage counter is written in each run's transaction). */
  async invocationsCommitted(): Promise<number> {
    return (await this.api("GET", "/v1/users/me")).data.billing_period_invocations as number;
  }

  /** Hits this node sent on to the node running their source (`fount_endpoint_forwards_total`). */
  async forwardedHits(): Promise<number> {
    const { text } = await this.apiRaw("GET", "/metrics");
    let n = 0;
    for (const m of text.matchAll(/^fount_endpoint_forwards_total(?:\{[^}]*\})? (\d+)$/gm)) n += Number(m[1]);
    return n;
  }

  /** SIGTERM (a graceful stop, which also writes a --cpu-prof profile), then the data dir goes. */
  async stop(): Promise<void> {
    await stopProcess(this.process, 10_000);
    unmountUnder(this.dataDir);
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}

/** Clock ticks per second of /proc times; 100 on every Linux build this bench targets. */
const ticksPerSecond = 100;

interface ProcStat {
  name: string;
  ppid: number;
  /** utime + stime + cutime + cstime, in ticks: the process, and its children already reaped. */
  ticks: number;
  /** utime + stime, in ticks: the process alone (its threads included). */
  own: number;
}

/**
 * The fields of a `/proc/.../stat` line from field 3 on, numbered as in proc(5) by `n(i)`. The command
 * name (field 2) may hold spaces and parentheses, so fields are counted after its last `)`.
 */
function statFields(text: string): { name: string; n: (i: number) => number } {
  const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
  return { name: text.slice(text.indexOf("(") + 1, text.lastIndexOf(")")), n: (i) => Number(fields[i - 3]) };
}

export function readProcStats(): Map<number, ProcStat> {
  const stats = new Map<number, ProcStat>();
  let entries: string[];
  try {
    entries = readdirSync("/proc");
  } catch {
    return stats;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const { name, n } = statFields(readFileSync(`/proc/${entry}/stat`, "utf8"));
      stats.set(Number(entry), {
        name,
        ppid: n(4),
        ticks: n(14) + n(15) + n(16) + n(17),
        own: n(14) + n(15),
      });
    } catch {
      // The process ended while listing.
    }
  }
  return stats;
}

/** CPU seconds used by `pid` and all its descendants (executor children of a server count as the server's). */
export function treeCpuSeconds(pid: number, stats = readProcStats()): number {
  const children = new Map<number, number[]>();
  for (const [p, s] of stats) {
    const list = children.get(s.ppid) ?? [];
    list.push(p);
    children.set(s.ppid, list);
  }
  let ticks = 0;
  const todo = [pid];
  while (todo.length > 0) {
    const p = todo.pop()!;
    ticks += stats.get(p)?.ticks ?? 0;
    todo.push(...(children.get(p) ?? []));
  }
  return ticks / ticksPerSecond;
}

/** CPU seconds used by `pid` itself (its threads, not its children). */
export function ownCpuSeconds(pid: number, stats = readProcStats()): number {
  return (stats.get(pid)?.own ?? 0) / ticksPerSecond;
}

/** CPU seconds used by every process whose command name starts with `prefix` (each alone). */
export function namedCpuSeconds(prefix: string, stats = readProcStats()): number {
  let ticks = 0;
  for (const s of stats.values()) if (s.name.startsWith(prefix)) ticks += s.own;
  return ticks / ticksPerSecond;
}

/**
 * CPU seconds used between two readings by the processes whose command name starts with `prefix`, each
 * alone: a process that started meanwhile counts whole, one that ended meanwhile not at all (a pool's
 * connection closed while idle would otherwise take its whole past off the sum).
 */
export function namedCpuSecondsSince(
  prefix: string,
  start: Map<number, ProcStat>,
  now = readProcStats(),
): number {
  let ticks = 0;
  for (const [pid, s] of now) {
    if (!s.name.startsWith(prefix)) continue;
    const before = start.get(pid);
    ticks += before?.name === s.name ? s.own - before.own : s.own;
  }
  return ticks / ticksPerSecond;
}

/** Pids of the processes whose parent is `pid` (a server's executors). */
export function childPids(pid: number): number[] {
  return [...readProcStats()].filter(([, s]) => s.ppid === pid).map(([p]) => p);
}

/** What a process holds, from `/proc/<pid>/smaps_rollup`, in MB; undefined once it is gone. */
export interface Memory {
  /** Its own pages (private dirty, mostly heaps). */
  anonMb: number;
  /** Its own pages plus its share of those it maps with others (Node's binary, mostly). */
  pssMb: number;
  rssMb: number;
}

export function memoryOf(pid: number): Memory | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
    const kb = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? 0);
    return { anonMb: kb("Anonymous") / 1024, pssMb: kb("Pss") / 1024, rssMb: kb("Rss") / 1024 };
  } catch {
    return undefined;
  }
}

/** CPU seconds (utime + stime) of each thread of `pid` by thread name, the main thread's marked `*`. */
export function threadCpuSeconds(pid: number): Map<string, number> {
  const out = new Map<string, number>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    const { name, n } = statFields(readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8"));
    const key = name + (tid === String(pid) ? "*" : "");
    out.set(key, (out.get(key) ?? 0) + (n(14) + n(15)) / ticksPerSecond);
  }
  return out;
}

/** Busy CPU seconds of the whole machine (all cores) since boot, from /proc/stat. */
export function machineBusySeconds(): number {
  try {
    const line = readFileSync("/proc/stat", "utf8").split("\n")[0] ?? "";
    const v = line.trim().split(/\s+/).slice(1).map(Number);
    const total = v.reduce((a, b) => a + b, 0);
    // idle and iowait are not work.
    return (total - (v[3] ?? 0) - (v[4] ?? 0)) / ticksPerSecond;
  } catch {
    return Number.NaN;
  }
}

/** Where the CPU went during a phase: the server process tree, the rest of this bench, everything else. */
export interface CpuSplit {
  serverS: number;
  benchS: number;
  /** Everything else on the machine, PostgreSQL's processes included. */
  otherS: number;
  /**
   * Of `otherS`, PostgreSQL's processes (every process named `postgres`: the backends of every
   * connection, whoever opened it, and the WAL writer, checkpointer and the rest; a backend that ended
   * meanwhile is not counted).
   */
  postgresS: number;
}

/** Starts counting; the returned function gives the split since then. Several servers (nodes) add up. */
export function cpuMeter(serverPids: number | number[]): () => CpuSplit {
  const pids = typeof serverPids === "number" ? [serverPids] : serverPids;
  const servers = (stats: Map<number, ProcStat>) =>
    pids.reduce((sum, pid) => sum + treeCpuSeconds(pid, stats), 0);
  const start = readProcStats();
  const s0 = servers(start);
  const b0 = treeCpuSeconds(process.pid, start);
  const m0 = machineBusySeconds();
  return () => {
    const now = readProcStats();
    const serverS = servers(now) - s0;
    // The bench's tree holds the server too.
    const benchS = treeCpuSeconds(process.pid, now) - b0 - serverS;
    const otherS = Math.max(0, machineBusySeconds() - m0 - serverS - benchS);
    return { serverS, benchS, otherS, postgresS: namedCpuSecondsSince("postgres", start, now) };
  };
}
