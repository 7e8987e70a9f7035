/**
 * Another commit checked out beside this working tree, for the A/B scripts (bench/compare.ts,
 * bench/compare-live.ts): a temporary git worktree that shares this checkout's node_modules, so a Fount
 * server can start from it with `FountProcess.start({ root })`.
 */
import { execFileSync } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { repoRoot } from "./processes.ts";

export interface Checkout {
  /** The worktree's directory. */
  root: string;
  /** The short hash checked out. */
  commit: string;
  /** Removes the worktree; call it in a `finally`. */
  remove(): void;
}

const git = (...args: string[]) => execFileSync("git", args, { cwd: repoRoot, encoding: "utf8" }).trim();

/** Checks `ref` out into a temporary worktree. */
export function checkout(ref: string): Checkout {
  const commit = git("rev-parse", "--short", ref);
  const root = mkdtempSync(path.join(os.tmpdir(), "fount-compare-"));
  // Executors run under uids of their own when the bench runs as root: they must reach the runner's folder.
  chmodSync(root, 0o755);
  git("worktree", "add", "--detach", root, commit);
  symlinkSync(path.join(repoRoot, "node_modules"), path.join(root, "node_modules"));
  return {
    root,
    commit,
    remove() {
      git("worktree", "remove", "--force", root);
      rmSync(root, { recursive: true, force: true });
    },
  };
}
