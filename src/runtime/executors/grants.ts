/**
 * What an executor may touch on disk: the owner's scratch folder (created 0700 under its uid) and
 * the folders of its components, opened up so an unprivileged uid can read them (docs/isolation.md).
 */
import fsp from "node:fs/promises";
import path from "node:path";
import type { BuiltComponent } from "../types.ts";
import { dirsKey, ExecutorError, type Owner } from "./model.ts";
import type { ScratchLimit } from "./scratch.ts";

/** Scratch folders, uids and readable folders of one pool. */
export class Grants {
  private readonly readDirCache = new Map<string, Promise<string[]>>();
  private readonly readable = new Map<string, Promise<void>>();
  /** Real path of `<dataDir>/scratch`, emptied and created on first use. */
  private scratchRoot: Promise<string> | undefined;
  private realDataDir: string | undefined;
  private nextUid = 0;

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
    if (this.isolateUsers && owner.uid === undefined) owner.uid = this.uidBase + this.nextUid++;
    await fsp.mkdir(scratch, { recursive: true, mode: 0o700 });
    if (owner.uid !== undefined) await fsp.chown(scratch, owner.uid, owner.uid);
    await fsp.chmod(scratch, 0o700);
    await this.limit.attach(scratch, owner.uid).catch((err: Error) => {
      throw new ExecutorError("executor_crash", `The scratch folder could not be mounted: ${err.message}`);
    });
    return scratch;
  }

  /** Real paths of the components' readDirs, made readable by executor uids. */
  async readDirsOf(components: BuiltComponent[]): Promise<string[]> {
    const out = new Set<string>();
    for (const component of components) {
      const key = dirsKey(component);
      let dirs = this.readDirCache.get(key);
      if (!dirs) {
        dirs = Promise.all(
          component.readDirs.map(async (d) => {
            const real = await fsp.realpath(d).catch(() => {
              throw new ExecutorError("executor_crash", `The component's folder ${d} does not exist`);
            });
            if (this.isolateUsers) await this.ensureReadable(real);
            return real;
          }),
        );
        this.readDirCache.set(key, dirs);
        dirs.catch(() => this.readDirCache.delete(key));
      }
      for (const d of await dirs) out.add(d);
    }
    return [...out];
  }

  /** Makes a folder every executor needs (the runner's) readable by executor uids. */
  async grantToExecutors(dir: string): Promise<void> {
    if (this.isolateUsers) await this.ensureReadable(dir);
  }

  private ensureReadable(dir: string): Promise<void> {
    let done = this.readable.get(dir);
    if (!done) {
      done = (async () => {
        await this.ensureReachable(path.dirname(dir));
        await openUp(dir);
      })();
      this.readable.set(dir, done);
      done.catch(() => this.readable.delete(dir));
    }
    return done;
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

/** Adds read (and, on folders, search) permission for others through a tree, not following links. */
async function openUp(target: string): Promise<void> {
  const st = await fsp.lstat(target);
  if (st.isSymbolicLink()) return;
  const want = st.isDirectory() ? 0o005 : 0o004;
  if ((st.mode & want) !== want) await fsp.chmod(target, (st.mode & 0o7777) | want);
  if (st.isDirectory()) {
    for (const name of await fsp.readdir(target)) await openUp(path.join(target, name));
  }
}
