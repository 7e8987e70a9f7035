/**
 * An exclusive lock on a file, held for as long as the process keeps it: an SQLite file in
 * `locking_mode=EXCLUSIVE` whose first write takes a POSIX lock SQLite then never gives back. The
 * kernel drops the lock when the process dies, however it dies, so a claim of a crashed server is
 * never stale; SQLite also refuses a second connection of the same process, so two apps in one test
 * process exclude each other too. Whoever holds it writes a sidecar `<file>.json` naming itself,
 * since the locked file cannot be read by the one it keeps out.
 */
import fs from "node:fs";
import { DatabaseSync } from "node:sqlite";

/** What the holder of a lock wrote about itself. */
export interface LockHolder {
  pid: number;
  [key: string]: unknown;
}

/** A lock held by this process; `release()` is idempotent. */
export interface FileLock {
  readonly file: string;
  release(): void;
}

/** Takes the lock, or returns undefined when another connection (another process, or this one) holds it. */
export function tryLock(file: string, about: Record<string, unknown> = {}): FileLock | undefined {
  let db: DatabaseSync;
  try {
    db = new DatabaseSync(file, { timeout: 0 });
  } catch (err) {
    throw new Error(`cannot open the lock file ${file}: ${(err as Error).message}`, { cause: err });
  }
  try {
    db.exec("PRAGMA locking_mode = EXCLUSIVE");
    db.exec("PRAGMA journal_mode = DELETE");
    // What the file says need not survive a power loss (the lock itself does not): no fsync per claim.
    db.exec("PRAGMA synchronous = OFF");
    // The write takes the EXCLUSIVE lock; in this locking mode it is kept until the connection closes.
    db.exec("BEGIN EXCLUSIVE");
    db.exec("CREATE TABLE IF NOT EXISTS holder (pid INTEGER)");
    db.exec("DELETE FROM holder");
    db.prepare("INSERT INTO holder (pid) VALUES (?)").run(process.pid);
    db.exec("COMMIT");
  } catch (err) {
    db.close();
    if (isBusy(err)) return undefined;
    throw new Error(`cannot lock ${file}: ${(err as Error).message}`, { cause: err });
  }
  const sidecar = `${file}.json`;
  fs.writeFileSync(sidecar, `${JSON.stringify({ ...about, pid: process.pid })}\n`, { mode: 0o644 });
  let held = true;
  return {
    file,
    release() {
      if (!held) return;
      held = false;
      fs.rmSync(sidecar, { force: true });
      db.close();
    },
  };
}

/** What the current holder wrote about itself, when it did and the file is still there. */
export function lockHolder(file: string): LockHolder | undefined {
  try {
    const parsed = JSON.parse(fs.readFileSync(`${file}.json`, "utf8")) as unknown;
    if (typeof parsed === "object" && parsed !== null && typeof (parsed as LockHolder).pid === "number") {
      return parsed as LockHolder;
    }
  } catch {
    // Not written yet, or already removed.
  }
  return undefined;
}

function isBusy(err: unknown): boolean {
  const e = err as { errcode?: number; message?: string };
  // SQLITE_BUSY (5) and SQLITE_LOCKED (6), with or without extended bits.
  const code = typeof e.errcode === "number" ? e.errcode & 0xff : undefined;
  return code === 5 || code === 6 || /database is locked|database table is locked/.test(e.message ?? "");
}
