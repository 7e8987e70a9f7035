/**
 * What an executor may touch on disk: the owner's scratch folder (created 0700 under its uid), its
 * owner's bundle folders (closed to every other uid), and the shared package folders of its components,
 * opened up so an unprivileged uid can read them (docs/isolation.md).
 */
import fsp from "node:fs/promises";
import path from "node:path";
import { ignoreVanished, OWNER_DIR_MODE, ownerFolderName, sweepBundleFolders } from "../bundle-layout.ts";
import type { BuiltComponent } from "../types.ts";
import { ExecutorError, type Owner } from "./model.ts";
import type { ScratchLimit } from "./scratch.ts";

/** Scratch folders, uids and readable folders of one pool. */
export class Grants {
  private readonly readable = new Map<string, Promise<string>>();
  /** Owner bundle folders found (real path, reachable), by the path components name them. */
  private readonly granted = new Map<string, Promise<string>>();
  /** The gid each owner folder was last given, and the change of it in progress, by real path. */
  private readonly groups = new Map<string, number>();
  private readonly grouping = new Map<string, Promise<void>>();
  /** `<dataDir>/packages` swept of old layouts and stale groups, once per pool (bundle-layout.ts). */
  private swept: Promise<void> | undefined;
  /** Real path of `<dataDir>/scratch`, emptied and created on first use. */
  private scratchRoot: Promise<string> | undefined;
  private realDataDir: string | undefined;
  private nextUid = 0;
  /** Real path of each folder resolved by `readDirsOf`, by the path components name it. */
  private readonly reals = new Map<string, string>();

  private readonly dataDir: string;
  private readonly isolateUsers: boolean;
  private readonly uidBase: number;

  private readonly limit: ScratchLimit;

  constructor(dataDir: string, isolateUsers: boolean, uidBase: number, limit: ScratchLimit) {
    this.limit = limit;
    this.dataDir = dataDir;
    this.isolateUsers = isolateUsers;
    this.uidBase = uidBase;
  }

  /** Real path of `<dataDir>/scratch`, emptied (and stale mounts gone) on the first call. */
  scratchRootDir(): Promise<string> {
    this.scratchRoot ??= (async () => {
      const root = path.join(this.dataDir, "scratch");
      // Mounts a crash left behind go first, so emptying cannot reach into a live tmpfs.
      await this.limit.resetRoot(root);
      // Scratch is temporary space; emptying it also retires folders owned by uids of a previous run.
      await fsp.rm(root, { recursive: true, force: true });
      await fsp.mkdir(root, { recursive: true, mode: 0o711 });
      await fsp.chmod(root, 0o711);
      const real = await fsp.realpath(root);
      this.realDataDir = path.dirname(real);
      if (this.isolateUsers) await this.ensureReachable(real);
      // No executor starts before bundle folders granted to a previous run's gids are closed again.
      await this.sweep();
      return real;
    })();
    this.scratchRoot.catch(() => {
      this.scratchRoot = undefined;
    });
    return this.scratchRoot;
  }

  /** Creates the owner's scratch folder (mode 0700, owned by its uid) and returns its real path. */
  async prepareScratch(owner: Owner): Promise<string> {
    const scratch = path.join(await this.scratchRootDir(), owner.scratchName);
    this.assignUid(owner);
    await fsp.mkdir(scratch, { recursive: true, mode: 0o700 });
    if (owner.uid !== undefined) {
      // The owner took a spare since (spares.ts) and has another uid now: what its earlier uid left
      // goes, as a tmpfs would have gone with the earlier process.
      if ((await fsp.stat(scratch)).uid !== owner.uid) await this.limit.empty(scratch);
      await fsp.chown(scratch, owner.uid, owner.uid);
    }
    await fsp.chmod(scratch, 0o700);
    await this.limit.attach(scratch, owner.uid).catch((err: Error) => {
      throw new ExecutorError("executor_crash", `The scratch folder could not be mounted: ${err.message}`);
    });
    return scratch;
  }

  /**
   * Real paths of the components' readDirs for `owner`'s executor: shared folders opened to executor
   * uids, and each component's owner folder, which must be `owner`'s, granted to its gid alone.
   */
  async readDirsOf(owner: Owner, components: BuiltComponent[]): Promise<string[]> {
    const out = new Set<string>();
    for (const component of components) {
      for (const d of component.readDirs) {
        out.add(await (d === component.ownerDir ? this.grantOwnerDir(owner, d) : this.shared(d)));
      }
    }
    return [...out];
  }

  /** Gives the owner its executor uid (and gid) for this pool's life, when executors get uids. */
  private assignUid(owner: Owner): void {
    if (this.isolateUsers && owner.uid === undefined) owner.uid = this.uidBase + this.nextUid++;
  }

  /** uids handed out so far (spares.ts stops starting spares well before the range runs out). */
  get uidsHandedOut(): number {
    return this.nextUid;
  }

  /** The real path `readDirsOf` found for a component's folder, if it resolved one. */
  realOf(dir: string): string | undefined {
    return this.reals.get(dir);
  }

  /**
   * Grants the owner's bundle folders among `dirs` (real paths) to its uid again: a spare taken by the
   * owner (spares.ts) runs under a uid of its own, which becomes the owner's.
   */
  async regrantOwnerDirs(owner: Owner, dirs: Iterable<string>): Promise<void> {
    for (const d of dirs)
      if (path.basename(d) === ownerFolderName(owner.id)) await this.grantOwnerDir(owner, d);
  }

  /** Makes `dir` reachable by executor uids (every folder above it searchable; changed only in dataDir). */
  async reachable(dir: string): Promise<void> {
    if (this.isolateUsers) await this.ensureReachable(dir);
  }

  /** A folder every executor may read, opened to executor uids once. */
  private shared(dir: string): Promise<string> {
    let done = this.readable.get(dir);
    if (!done) {
      done = (async () => {
        const real = await realFolder(dir);
        if (this.isolateUsers) await this.ensureReadable(real);
        this.reals.set(dir, real);
        return real;
      })();
      this.readable.set(dir, done);
      done.catch(() => this.readable.delete(dir));
    }
    return done;
  }

  /**
   * The owner's bundle folder, checked to be the owner's own (its name is the owner's hash) and, with
   * uids, made root's with the owner's executor gid and mode 0750: no other uid may enter it. The gid is
   * read when the change runs, and changes of one folder run in order: an owner that took a spare
   * (spares.ts) changes uid, and a grant begun under its earlier uid must not land after the new one.
   */
  private async grantOwnerDir(owner: Owner, dir: string): Promise<string> {
    if (path.basename(dir) !== ownerFolderName(owner.id)) {
      throw new ExecutorError("executor_crash", "The component was built for another owner's executor");
    }
    this.assignUid(owner);
    let found = this.granted.get(dir);
    if (!found) {
      found = (async () => {
        await this.sweep();
        const real = await realFolder(dir);
        if (this.isolateUsers) await this.ensureReachable(path.dirname(real));
        return real;
      })();
      this.granted.set(dir, found);
      found.catch(() => this.granted.delete(dir));
    }
    const real = await found;
    this.reals.set(dir, real);
    if (owner.uid === undefined) return real;
    const done = (this.grouping.get(real) ?? Promise.resolve())
      .catch(() => {})
      .then(async () => {
        const gid = owner.uid;
        if (gid === undefined || this.groups.get(real) === gid) return;
        await fsp.chown(real, -1, gid);
        await fsp.chmod(real, OWNER_DIR_MODE);
        this.groups.set(real, gid);
      });
    this.grouping.set(real, done);
    await done;
    return real;
  }

  /** Sweeps `<dataDir>/packages` before the pool starts an executor or grants an owner folder. */
  private sweep(): Promise<void> {
    this.swept ??= sweepBundleFolders(path.join(this.dataDir, "packages"), this.isolateUsers);
    this.swept.catch(() => {
      this.swept = undefined;
    });
    return this.swept;
  }

  /** Makes a folder every executor needs (the runner's) readable by executor uids. */
  async grantToExecutors(dir: string): Promise<void> {
    await this.shared(dir);
  }

  private async ensureReadable(dir: string): Promise<void> {
    await this.ensureReachable(path.dirname(dir));
    await openUp(dir);
  }

  /** Every folder from `dir` up to `/` must be searchable by others; only folders in dataDir are changed. */
  private async ensureReachable(dir: string): Promise<void> {
    for (let d = dir; ; d = path.dirname(d)) {
      const st = await fsp.stat(d);
      if ((st.mode & 0o001) === 0) {
        if (!isInside(d, this.dataDir) && !isInside(d, this.realDataDir ?? this.dataDir)) {
          throw new ExecutorError(
            "executor_crash",
            `Executor processes run under their own uids and cannot reach ${dir}: ${d} is not searchable by other users (chmod o+x it, or set isolateUsers: false)`,
          );
        }
        await fsp.chmod(d, (st.mode & 0o7777) | 0o001);
      }
      if (d === path.dirname(d)) return;
    }
  }
}

function isInside(child: string, parent: string): boolean {
  const rel = path.relative(parent, child);
  return rel === "" || (!rel.startsWith("..") && !path.isAbsolute(rel));
}

/** Real path of a component's folder; executor_crash when it is missing. */
async function realFolder(dir: string): Promise<string> {
  return fsp.realpath(dir).catch(() => {
    throw new ExecutorError("executor_crash", `The component's folder ${dir} does not exist`);
  });
}

/**
 * Adds read (and, on folders, search) permission for others through a tree, not following links. A
 * build may add or remove files meanwhile (a temporary bundle renamed, a `.tmp-*` install moved):
 * what vanishes under the walk is skipped, not an executor crash.
 */
async function openUp(target: string): Promise<void> {
  await ignoreVanished(async () => {
    const st = await fsp.lstat(target);
    if (st.isSymbolicLink()) return;
    const want = st.isDirectory() ? 0o005 : 0o004;
    if ((st.mode & want) !== want) await fsp.chmod(target, (st.mode & 0o7777) | want);
    if (st.isDirectory()) {
      for (const name of await fsp.readdir(target)) await openUp(path.join(target, name));
    }
  });
}
