/**
 * Removes package set folders (`<dataDir>/packages/<key>/`) that nothing uses any more: each distinct set
 * of package versions ever deployed kept its folder for ever, so deploys with changing dependencies grew
 * the data folder without bound. A build waits for a pass under way before it looks for its set, and a
 * pass never removes a set built since this server started: executors were granted its folders and read
 * them by path for as long as they live (a folder missing when one starts is never readable by it), so
 * such a set goes at the next start, when no source uses it. See docs/runtime-build.md.
 */
import { randomBytes } from "node:crypto";
import fs from "node:fs/promises";
import path from "node:path";

// An install lasts its deadline at most (120 s by default): an older temporary folder is a crashed one's.
const STALE_TEMPORARY_MS = 60 * 60_000;

/** Keys of the package sets to keep: those some source's component uses. */
export type KeptPackageSets = () => Promise<Iterable<string>>;

export class PackageSetPruner {
  readonly #dir: string;
  readonly #kept: KeptPackageSets;
  readonly #graceMs: number;
  /** Sets built since this server started: never removed before the next start. */
  readonly #builtHere = new Set<string>();
  #pass: Promise<void> | undefined;

  /** `graceMs`: a set built within this long before a start is kept even when no source uses it (yet). */
  constructor(packagesDir: string, kept: KeptPackageSets, graceMs: number) {
    this.#dir = packagesDir;
    this.#kept = kept;
    this.#graceMs = graceMs;
  }

  /**
   * Runs `work` (install, bundle) for set `key` once no pass is under way; from then on no pass of this
   * server removes the set's folder.
   */
  async hold<T>(key: string, work: () => Promise<T>): Promise<T> {
    while (this.#pass) await this.#pass;
    this.#builtHere.add(key);
    try {
      return await work();
    } finally {
      const now = Date.now();
      // For the grace period at the next start: the time of the set's last build.
      await fs.utimes(path.join(this.#dir, key), now / 1000, now / 1000).catch(() => undefined);
    }
  }

  /** Removes the folders of sets no source uses that were not built since the start nor within the grace period before it. */
  prune(): Promise<void> {
    this.#pass ??= this.#prune().finally(() => {
      this.#pass = undefined;
    });
    return this.#pass;
  }

  async #prune(): Promise<void> {
    const kept = new Set(await this.#kept());
    const now = Date.now();
    const trash: string[] = [];
    for (const name of await names(this.#dir)) {
      const dir = path.join(this.#dir, name);
      if (name.startsWith(".trash-")) trash.push(dir);
      else if (name.startsWith(".tmp-")) {
        if (now - (await modified(dir)) > STALE_TEMPORARY_MS) trash.push(dir);
      } else if (!name.startsWith(".") && !kept.has(name) && !this.#builtHere.has(name)) {
        if (now - (await modified(dir)) < this.#graceMs) continue;
        // Renamed first: a build after this pass finds no folder and installs the set again whole.
        const to = path.join(this.#dir, `.trash-${name.slice(0, 16)}-${randomBytes(6).toString("hex")}`);
        try {
          await fs.rename(dir, to);
        } catch {
          continue;
        }
        trash.push(to);
      }
    }
    for (const dir of trash) await fs.rm(dir, { recursive: true, force: true });
  }
}

async function names(dir: string): Promise<string[]> {
  try {
    return await fs.readdir(dir);
  } catch {
    return [];
  }
}

async function modified(file: string): Promise<number> {
  try {
    return (await fs.stat(file)).mtimeMs;
  } catch {
    return Date.now();
  }
}
