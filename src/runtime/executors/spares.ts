/**
 * Spare executor processes (issue 29; docs/isolation.md, "Spare executors"): started ahead with no
 * owner, so an owner whose process stopped (idle, or the server started) takes one whose node and realm
 * are already up instead of waiting for them. A spare is forked like any executor, under a uid of its
 * own, granted the runner, a scratch folder of its own and one more folder, `<dataDir>/spares/<n>`
 * (root's, 0750, the spare's gid), empty until an owner takes the spare. Taking it gives the owner the
 * spare's uid (its bundle folders are granted to that gid) and fills the folder with links to the
 * owner's folders, made by the server: the process then reads the owner's components by those paths
 * and nothing else. It runs with `--preserve-symlinks`, so that Node's loader keeps the linked paths
 * rather than resolving them to real ones it may not read.
 */
import fsp from "node:fs/promises";
import path from "node:path";
import type { BuiltComponent } from "../types.ts";
import { UID_RANGE_SIZE } from "../uid-range.ts";
import type { PoolCore } from "./core.ts";
import { type Child, ExecutorError, type Owner } from "./model.ts";

/** Spares start only while less than this share of the uid range is handed out: owners keep the rest. */
const SPARE_UID_SHARE = 0.5;
/** After a spare ended before anyone took it, none starts for this long (a start that keeps failing). */
const FAILED_SPARE_PAUSE_MS = 30_000;
/**
 * A taken spare is replaced once the call that took it answered, or after this long: on 2 cores the
 * replacement's node start would otherwise compete with that first call (docs/architecture.md).
 */
const REPLACE_AFTER_MS = 1000;
/** Prefix of a spare's stand-in owner and scratch folder: no owner's folder can start with a dot (dispatch.ts). */
const SPARE_PREFIX = ".spare-";

/** The pool's spare processes: started, taken by owners, replaced. */
export class Spares {
  private readonly core: PoolCore;
  /** How many wait at most; 0: none. */
  readonly count: number;
  /** Started and not taken yet. */
  private readonly waiting = new Set<Child>();
  private seq = 0;
  private pausedUntil = 0;
  private refill: NodeJS.Timeout | undefined;
  /** `<dataDir>/spares`, emptied and created on first use. */
  private root: Promise<string> | undefined;
  private warned = false;

  constructor(core: PoolCore, count: number) {
    this.core = core;
    this.count = count;
  }

  /** Spares waiting (started or starting, not taken). */
  get size(): number {
    return this.waiting.size;
  }

  /** Starts spares until `count` wait. */
  fill(): void {
    while (this.waiting.size < this.count && this.mayStart()) {
      const name = `${SPARE_PREFIX}${++this.seq}`;
      const stand: Owner = {
        id: name,
        uid: undefined,
        scratchName: name,
        dirs: new Set(),
        child: null,
        sources: new Map(),
      };
      this.waiting.add(this.core.spawn(stand, { folder: "", taken: false }));
    }
    // Called during a pause (a replacement's call answered): try again when it ends.
    if (this.waiting.size < this.count && Date.now() < this.pausedUntil)
      this.schedule(this.pausedUntil - Date.now());
  }

  private mayStart(): boolean {
    if (this.core.closed || Date.now() < this.pausedUntil) return false;
    if (this.core.grants.uidsHandedOut < UID_RANGE_SIZE * SPARE_UID_SHARE) return true;
    if (!this.warned) {
      this.warned = true;
      this.core.logger?.warn(
        { uids: this.core.grants.uidsHandedOut },
        "no more spare executors: half of this server's uid range is handed out, the rest is kept for owners",
      );
    }
    return false;
  }

  /**
   * Called by lifecycle.ts once the spare has its uid, before the fork: creates its folder, root's, mode
   * 0750, its gid (no other executor uid can enter it), empty. Not root, it is the server's like every
   * executor's folder, and the permission model alone keeps other executors out.
   */
  async prepare(child: Child): Promise<void> {
    const root = await this.rootDir();
    const folder = path.join(root, child.owner.scratchName.slice(SPARE_PREFIX.length));
    await fsp.mkdir(folder, { mode: 0o750 });
    if (child.owner.uid !== undefined) await fsp.chown(folder, process.getuid?.() ?? 0, child.owner.uid);
    await fsp.chmod(folder, 0o750);
    child.spare!.folder = folder;
  }

  private rootDir(): Promise<string> {
    this.root ??= (async () => {
      // The data dir prepared (its bundle folders given back to root's group) before any spare starts.
      const scratch = await this.core.grants.scratchRootDir();
      const root = path.join(path.dirname(scratch), "spares");
      // Folders and links of an earlier run (rm does not follow links).
      await fsp.rm(root, { recursive: true, force: true });
      await fsp.mkdir(root, { mode: 0o711 });
      await fsp.chmod(root, 0o711);
      await this.core.grants.reachable(root);
      return root;
    })();
    this.root.catch(() => {
      this.root = undefined;
    });
    return this.root;
  }

  /**
   * A spare for `owner`, which becomes its process, when one waits and no process of the owner still
   * works (one retiring with calls left keeps the owner's uid: its bundle folders' group moves to the
   * spare's). A process being killed (stopped idle) is no obstacle: it runs nothing more.
   */
  take(owner: Owner): Child | undefined {
    if (this.waiting.size === 0 || this.core.closed) return undefined;
    for (const c of this.core.children) if (c.owner === owner && !c.gone && !c.killReason) return undefined;
    let child: Child | undefined;
    for (const c of this.waiting) {
      if (c.gone || c.killReason) continue;
      if (!child || (c.started && !child.started)) child = c;
    }
    if (!child) return undefined;
    this.waiting.delete(child);
    const stand = child.owner;
    child.owner = owner;
    child.spare!.taken = true;
    // Synchronously, so that calls racing this one see the owner's new uid and the process's read set.
    if (stand.uid !== undefined) owner.uid = stand.uid;
    child.allowed = new Set(owner.dirs);
    // Its idle time counts from now: the watch would otherwise stop a spare that waited long.
    child.lastActive = Date.now();
    const started = child.ready;
    // The links need only the spare's folder: made while a spare still starting finishes its start.
    const adopted = child.spare!.folder
      ? this.adopt(child, owner)
      : started.then(() => this.adopt(child, owner));
    child.ready = Promise.all([started, adopted]).then(() => {});
    child.ready.catch(() => {});
    this.schedule(REPLACE_AFTER_MS);
    return child;
  }

  /** Grants the owner's folders to the spare's uid and links them into its folder. */
  private async adopt(child: Child, owner: Owner): Promise<void> {
    try {
      await this.core.grants.regrantOwnerDirs(owner, child.allowed);
      for (const dir of child.allowed) {
        const at = path.join(child.spare!.folder, dir);
        await fsp.mkdir(path.dirname(at), { recursive: true, mode: 0o755 });
        await fsp.symlink(dir, at).catch((err: NodeJS.ErrnoException) => {
          if (err.code !== "EEXIST") throw err;
        });
      }
    } catch (err) {
      const message = `A spare executor could not be given to the owner: ${(err as Error).message}`;
      this.core.kill(child, { code: "executor_crash", message });
      throw new ExecutorError("executor_crash", message);
    }
  }

  /** The path a process reads `component`'s entry file by: a spare's through its folder's links. */
  entryPath(child: Child, component: BuiltComponent): string {
    const folder = child.spare?.folder;
    if (!folder) return component.entryFile;
    for (const dir of component.readDirs) {
      if (!component.entryFile.startsWith(`${dir}/`)) continue;
      const real = this.core.grants.realOf(dir) ?? dir;
      return path.join(folder, real, component.entryFile.slice(dir.length));
    }
    return component.entryFile;
  }

  /** A process that started as a spare answered a call or inspection: its replacement may start. */
  answered(child: Child): void {
    if (!child.spare?.taken || child.spare.replaced) return;
    child.spare.replaced = true;
    clearTimeout(this.refill);
    this.refill = undefined;
    this.schedule(0);
  }

  /** The process of a spare ended: its folders go once its scratch is released; a new spare follows. */
  gone(child: Child, released: Promise<void>): void {
    const untaken = this.waiting.delete(child);
    const folder = child.spare?.folder;
    const scratch = child.scratch?.dir;
    void released
      .then(async () => {
        if (folder) await fsp.rm(folder, { recursive: true, force: true });
        if (scratch) await fsp.rm(scratch, { recursive: true, force: true });
      })
      .catch(() => {});
    if (this.core.closed) return;
    if (untaken) {
      this.pausedUntil = Date.now() + FAILED_SPARE_PAUSE_MS;
      this.schedule(FAILED_SPARE_PAUSE_MS);
    }
  }

  private schedule(ms: number): void {
    if (this.count === 0 || this.core.closed || this.refill) return;
    this.refill = setTimeout(() => {
      this.refill = undefined;
      this.fill();
    }, ms);
    this.refill.unref();
  }

  /** Stops refilling (pool close; lifecycle.ts kills the processes). */
  close(): void {
    clearTimeout(this.refill);
    this.refill = undefined;
  }
}
