/**
 * The size limit of each owner's scratch folder (FOUNT_EXECUTOR_SCRATCH_MB, docs/isolation.md).
 *
 * - `tmpfs`: when the server may mount (root with CAP_SYS_ADMIN), each owner's folder is a tmpfs of
 *   the limit's size, mounted when its executor starts and unmounted when it stops, at close and (for
 *   mounts a crash left behind) at start. Writing past it fails in the component with ENOSPC; the
 *   kernel enforces it, so component code cannot undo it.
 * - `measured`: otherwise the pool sums the folder's size at an interval; an owner over the limit has
 *   its executor stopped (the running invocations fail with `scratch_full`) and the folder emptied.
 */
import { execFile, execFileSync } from "node:child_process";
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

/** What the first pool of this process found out about mounting (`ScratchLimit.probe`). */
let mountProbe: Promise<ScratchMode> | undefined;

export type ScratchMode = "tmpfs" | "measured";

/** Mount points at or under `root`, deepest first, from /proc/self/mountinfo. */
export function mountsUnder(root: string): string[] {
  let text: string;
  try {
    text = fs.readFileSync("/proc/self/mountinfo", "utf8");
  } catch {
    return [];
  }
  const out: string[] = [];
  for (const line of text.split("\n")) {
    const field = line.split(" ")[4];
    if (!field) continue;
    // mountinfo escapes space, tab, newline and backslash as octal.
    const point = field.replace(/\\([0-7]{3})/g, (_, o: string) =>
      String.fromCharCode(Number.parseInt(o, 8)),
    );
    if (point === root || point.startsWith(`${root}/`)) out.push(point);
  }
  return out.sort((a, b) => b.length - a.length);
}

/**
 * The scratch roots of the pools this process has open, each unmounted by one `exit` listener when the
 * process ends without closing them (a second Ctrl-C, `process.exit`). A listener per pool passed
 * Node's bound of ten listeners in processes that start many servers (the tests).
 */
const openRoots = new Map<string, number>();
let unmountsAtExit = false;

function unmountAtExit(root: string): void {
  openRoots.set(root, (openRoots.get(root) ?? 0) + 1);
  if (unmountsAtExit) return;
  unmountsAtExit = true;
  process.once("exit", () => {
    for (const open of openRoots.keys()) {
      for (const point of mountsUnder(open)) {
        try {
          execFileSync("umount", ["-l", point], { stdio: "ignore" });
        } catch {}
      }
    }
  });
}

function closeRoot(root: string): void {
  const n = (openRoots.get(root) ?? 1) - 1;
  if (n > 0) openRoots.set(root, n);
  else openRoots.delete(root);
}

async function unmount(dir: string): Promise<void> {
  // Lazy: a process still inside it (an executor being killed) does not keep the mount busy.
  await run("umount", ["-l", dir]);
}

/** Mounts and unmounts owners' scratch tmpfs, or measures folders where mounting is not allowed. */
export class ScratchLimit {
  readonly limitBytes: number;
  private mode: ScratchMode | undefined;
  /** Last pending mount or unmount per folder: operations on one folder run in order. */
  private readonly releasing = new Map<string, Promise<void>>();
  /** Live executors per folder. */
  private readonly users = new Map<string, number>();
  private readonly forced: ScratchMode | undefined;
  private root: string | undefined;
  /** The root this pool has counted in `openRoots`, until `detachAll`. */
  private rootAtExit: string | undefined;
  /** `detachAll` ran (server close): nothing is mounted any more. */
  private closed = false;

  constructor(limitMb: number, forced?: ScratchMode) {
    this.limitBytes = limitMb * 1024 * 1024;
    this.forced = forced;
  }

  /** The mode in force; known once `resetRoot` ran. */
  get current(): ScratchMode | undefined {
    return this.mode;
  }

  /** Unmounts what a previous run left mounted under `root` (before the root is emptied) and picks the mode. */
  async resetRoot(root: string): Promise<void> {
    const real = await fsp.realpath(root).catch(() => path.resolve(root));
    this.root = real;
    // A server that exits without closing the pool (a second Ctrl-C, process.exit) unmounts too;
    // after a SIGKILL the next start does it.
    if (this.rootAtExit === undefined) {
      this.rootAtExit = real;
      unmountAtExit(real);
    }
    for (const point of mountsUnder(real)) await unmount(point).catch(() => {});
    this.mode ??= this.forced ?? (await this.probe(real));
  }

  /**
   * Whether a tmpfs can be mounted here: tried on a throwaway folder next to the scratch root, once per
   * process (whether it may mount does not change while it runs; tests start many pools in one).
   */
  private probe(root: string): Promise<ScratchMode> {
    mountProbe ??= this.tryMount(root);
    return mountProbe;
  }

  private async tryMount(root: string): Promise<ScratchMode> {
    if (process.platform !== "linux" || process.getuid?.() !== 0) return "measured";
    const dir = `${root}.probe-${process.pid}`;
    try {
      await fsp.mkdir(dir, { recursive: true });
      await run("mount", ["-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", dir]);
      await unmount(dir);
      return "tmpfs";
    } catch {
      return "measured";
    } finally {
      await fsp.rmdir(dir).catch(() => {});
    }
  }

  /**
   * Called with the owner's folder before an executor of the owner starts. Processes of one owner (a
   * retiring one and its replacement) share one mount: it is mounted for the first and unmounted after
   * the last, and operations on one folder run one after another.
   */
  async attach(dir: string, uid: number | undefined): Promise<void> {
    // An executor starting while the pool closes (a spare's refill, a call in flight) mounts nothing: a
    // mount made after `detachAll` looked would outlive the server and keep its data folder busy.
    if (this.closed) throw new Error("The executor pool is closed");
    this.users.set(dir, (this.users.get(dir) ?? 0) + 1);
    try {
      await this.serial(dir, async () => {
        if (this.mode !== "tmpfs" || mountsUnder(dir).includes(dir)) return;
        const id = uid ?? process.getuid?.() ?? 0;
        const size = Math.max(this.limitBytes, 4096);
        await run("mount", ["-t", "tmpfs", "-o", `size=${size},mode=0700,uid=${id},gid=${id}`, "tmpfs", dir]);
      });
    } catch (err) {
      this.release(dir);
      throw err;
    }
  }

  /**
   * Called when an executor of the owner is gone: after the last one, the tmpfs (and what was in it)
   * goes; in measured mode the folder is emptied when `over` (it went past the limit).
   */
  detach(dir: string, over: boolean): Promise<void> {
    const last = this.release(dir);
    return this.serial(dir, async () => {
      if (this.mode !== "tmpfs") {
        if (over) await this.empty(dir);
      } else if (last && !this.users.has(dir) && mountsUnder(dir).includes(dir)) {
        await unmount(dir);
      }
    }).catch(() => {});
  }

  private release(dir: string): boolean {
    const n = (this.users.get(dir) ?? 1) - 1;
    if (n > 0) this.users.set(dir, n);
    else this.users.delete(dir);
    return n <= 0;
  }

  private serial(dir: string, op: () => Promise<void>): Promise<void> {
    const done = (this.releasing.get(dir) ?? Promise.resolve()).catch(() => {}).then(op);
    const tail = done.catch(() => {});
    this.releasing.set(dir, tail);
    void tail.then(() => {
      if (this.releasing.get(dir) === tail) this.releasing.delete(dir);
    });
    return done;
  }

  /** Unmounts every owner's tmpfs under the scratch root (server close). */
  async detachAll(): Promise<void> {
    this.closed = true;
    if (this.rootAtExit !== undefined) closeRoot(this.rootAtExit);
    this.rootAtExit = undefined;
    await Promise.all([...this.releasing.values()]);
    if (this.mode !== "tmpfs" || !this.root) return;
    for (const point of mountsUnder(this.root)) await unmount(point).catch(() => {});
  }

  /** Bytes used under `dir` (measured mode), not following links. */
  async usedBytes(dir: string): Promise<number> {
    let total = 0;
    const walk = async (d: string): Promise<void> => {
      const entries = await fsp.readdir(d, { withFileTypes: true }).catch(() => []);
      for (const entry of entries) {
        const p = path.join(d, entry.name);
        const st = await fsp.lstat(p).catch(() => undefined);
        if (!st) continue;
        total += Math.max(st.size, st.blocks * 512);
        if (st.isDirectory()) await walk(p);
      }
    };
    await walk(dir);
    return total;
  }

  /** Empties the folder (measured mode, after its owner went over the limit). */
  async empty(dir: string): Promise<void> {
    const names = await fsp.readdir(dir).catch(() => []);
    await Promise.all(names.map((n) => fsp.rm(path.join(dir, n), { recursive: true, force: true })));
  }
}
