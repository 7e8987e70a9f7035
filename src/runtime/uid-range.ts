/**
 * Each Fount server's executors run under uids no other Fount server on the host uses, so a component
 * of one server can never signal, trace or read the files of another's executors. A server claims a
 * range of `UID_RANGE_SIZE` uids under a host-wide folder: one lock file per range, held (see
 * file-lock.ts) for the process's life, and a folder lock that makes claiming one at a time. A
 * range whose holder died is free again at once: the kernel dropped its lock.
 */
import fs from "node:fs";
import path from "node:path";
import { ConfigError } from "../config.ts";
import { type FileLock, lockHolder, tryLock } from "../file-lock.ts";

/** Uids per server: one per owner with a live executor, so far more than one server ever starts. */
export const UID_RANGE_SIZE = 100_000;
/**
 * Where automatic ranges start: above the 100000–165535 blocks `/etc/subuid` gives rootless
 * containers, and clear of the fixed 200000 base of Fount versions that did not claim ranges.
 */
export const FIRST_AUTO_UID = 1_000_000;
/** Uids stay below 2^31 - 1: some tools treat larger ones as negative, and (uid_t)-1 means "none". */
const MAX_UID = 2 ** 31 - 2;
/** The host-wide folder of claims. */
export const defaultClaimsDir = "/run/fount/uids";
const CLAIM_WAIT_MS = 10_000;

/** A claimed range of uids, [base, base + size); `release()` frees it (idempotent). */
export interface UidRange {
  readonly base: number;
  readonly size: number;
  release(): void;
}

/** No range could be claimed; the server stops at start with its message. */
export class UidRangeError extends ConfigError {}

export interface ClaimOptions {
  /** FOUNT_EXECUTOR_UID_BASE: this range exactly, or an error when another server holds part of it. */
  base?: number | undefined;
  /** Written next to the claim, for the message another server shows. */
  dataDir: string;
  claimsDir?: string;
}

/** Claims a uid range no other live Fount server on this host holds. */
export function claimUidRange(options: ClaimOptions): UidRange {
  const dir = options.claimsDir ?? defaultClaimsDir;
  fs.mkdirSync(dir, { recursive: true, mode: 0o755 });
  const guard = waitForLock(path.join(dir, "claiming.lock"));
  try {
    const live = liveClaims(dir);
    const size = UID_RANGE_SIZE;
    let base: number;
    if (options.base !== undefined) {
      base = options.base;
      if (base + size - 1 > MAX_UID) {
        throw new UidRangeError(`FOUNT_EXECUTOR_UID_BASE=${base}: the range must end below ${MAX_UID + 1}`);
      }
      const clash = live.find((c) => overlaps(c.base, base, size));
      if (clash) {
        const who = clash.holder
          ? ` (pid ${clash.holder.pid}, data dir ${String(clash.holder.dataDir ?? "?")})`
          : "";
        throw new UidRangeError(
          `FOUNT_EXECUTOR_UID_BASE=${base}: uids ${clash.base}–${clash.base + size - 1} belong to another Fount server${who}; pick a base at least ${size} away from it, or leave the variable unset`,
        );
      }
    } else {
      base = FIRST_AUTO_UID;
      while (live.some((c) => overlaps(c.base, base, size))) base += size;
      if (base + size - 1 > MAX_UID)
        throw new UidRangeError("every executor uid range on this host is taken");
    }
    const lock = tryLock(path.join(dir, `${base}.lock`), { dataDir: options.dataDir, size });
    if (!lock) throw new UidRangeError(`the uid range at ${base} was claimed while this server claimed it`);
    return {
      base,
      size,
      // The file stays: removing it here, outside the folder lock, raced a claimer probing it (its
      // write then failed with SQLITE_READONLY_DBMOVED). The next claimer finds it free and removes it.
      release: () => lock.release(),
    };
  } finally {
    guard.release();
  }
}

interface Claim {
  base: number;
  holder: { pid: number; dataDir?: unknown } | undefined;
}

/** Claims whose holder lives; files of dead holders are removed on the way. */
function liveClaims(dir: string): Claim[] {
  const out: Claim[] = [];
  for (const name of fs.readdirSync(dir)) {
    const m = /^(\d+)\.lock$/.exec(name);
    if (!m) continue;
    const file = path.join(dir, name);
    let probe: FileLock | undefined;
    try {
      probe = tryLock(file);
    } catch (err) {
      // Removed while probed (by a server of an older version releasing its range): nobody holds it.
      if (!fs.existsSync(file)) continue;
      throw err;
    }
    if (probe) {
      // Nobody holds it: its server is gone. Only claimers (who hold the folder lock) remove files.
      probe.release();
      fs.rmSync(file, { force: true });
      continue;
    }
    out.push({ base: Number(m[1]), holder: lockHolder(file) });
  }
  return out;
}

function overlaps(a: number, b: number, size: number): boolean {
  return a < b + size && b < a + size;
}

/** The folder lock is held for milliseconds; wait for it rather than fail a server that starts alongside. */
function waitForLock(file: string): FileLock {
  const deadline = Date.now() + CLAIM_WAIT_MS;
  const nap = new Int32Array(new SharedArrayBuffer(4));
  for (;;) {
    const lock = tryLock(file);
    if (lock) return lock;
    if (Date.now() > deadline) throw new UidRangeError(`${file} stayed locked for ${CLAIM_WAIT_MS} ms`);
    Atomics.wait(nap, 0, 0, 20);
  }
}
