/**
 * Where component bundles live on disk. A package set's folder (`<dataDir>/packages/<key>/`) holds the
 * parts every tenant may read (`package.json`, `node_modules/`) and `owners/<owner folder>/<codeHash>.mjs`,
 * one folder per owner (user or organization) whose executor runs the bundles: Node's module resolution
 * walks up from a bundle to `<key>/node_modules`, and an executor is granted its own owner's folder
 * only, never another owner's nor the `owners/` list (docs/isolation.md, "Where bundles are").
 */
import { hash } from "node:crypto";
import fsp from "node:fs/promises";
import path from "node:path";

/** Folder of a package set that holds one folder per owner; others may pass through it, not list it. */
export const OWNERS_DIR = "owners";
/** Mode of `owners/`: searchable, not listable, by executor uids. */
export const OWNERS_DIR_MODE = 0o711;
/**
 * Mode of an owner's bundle folder when the server runs as root: owned by root, its group the owner's
 * executor gid once granted (root's until then), nothing for other uids. Not root, executors share the
 * server's uid and the folder keeps the modes bundles always had (0755).
 */
export const OWNER_DIR_MODE = 0o750;
/** Where bundles of every tenant were written, shared, before owner folders (removed at start). */
const LEGACY_COMPONENTS_DIR = "components";

/**
 * Name of an owner's bundle folder: a hash of its id, so no id reaches a path and no path trick an id.
 * Checked for every batch sent to an executor (grants.ts), hence the one-shot `hash`.
 */
export function ownerFolderName(ownerId: string): string {
  return hash("sha256", `fount-owner\0${ownerId}`, "hex").slice(0, 32);
}

/** The folder of `ownerId`'s bundles in the package set folder `packageSetDir`. */
export function ownerBundleDir(packageSetDir: string, ownerId: string): string {
  return path.join(packageSetDir, OWNERS_DIR, ownerFolderName(ownerId));
}

/**
 * Prepares `<dataDir>/packages` before any executor is granted a bundle folder: removes the shared
 * `components/` folders of older versions (their bundles are rebuilt into owner folders when next
 * loaded, since a bundle's path is never stored), and with `resetGroups` gives every owner folder back
 * to the server's group, because executor gids are handed out anew by each server run: a folder granted
 * to a gid of the previous run must not open to whoever holds that gid now. Files vanishing meanwhile
 * (a build's temporary file renamed, a package set installed) are skipped.
 */
export async function sweepBundleFolders(packagesDir: string, resetGroups: boolean): Promise<void> {
  for (const key of await names(packagesDir)) {
    if (key.startsWith(".")) continue;
    const setDir = path.join(packagesDir, key);
    await fsp.rm(path.join(setDir, LEGACY_COMPONENTS_DIR), { recursive: true, force: true });
    if (!resetGroups) continue;
    const owners = path.join(setDir, OWNERS_DIR);
    for (const name of await names(owners)) {
      await ignoreVanished(async () => {
        const dir = path.join(owners, name);
        await fsp.chown(dir, -1, process.getgid?.() ?? 0);
        await fsp.chmod(dir, OWNER_DIR_MODE);
      });
    }
  }
}

/** The entries of a folder, none when it is gone (or not a folder). */
async function names(dir: string): Promise<string[]> {
  try {
    return await fsp.readdir(dir);
  } catch (err) {
    if (vanished(err)) return [];
    throw err;
  }
}

/** Runs `fn`, treating a file or folder that disappeared under it as done. */
export async function ignoreVanished(fn: () => Promise<unknown>): Promise<void> {
  try {
    await fn();
  } catch (err) {
    if (!vanished(err)) throw err;
  }
}

/** ENOENT, or ENOTDIR when a folder on the way was replaced by a file. */
function vanished(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  return code === "ENOENT" || code === "ENOTDIR";
}
