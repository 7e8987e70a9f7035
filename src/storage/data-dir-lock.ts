/**
 * One server per data dir: two servers on one SQLite file and one scratch folder would each empty the
 * other's scratch, run the same timers twice and race on the store. The server holds
 * `<dataDir>/server.lock` (file-lock.ts) for its whole life; a second one stops at start naming the
 * first. The lock goes with the process, so a crashed server never blocks the next start.
 */
import fs from "node:fs";
import path from "node:path";
import { ConfigError } from "../config.ts";
import { type FileLock, lockHolder, tryLock } from "../file-lock.ts";

/** Locks the data dir for this process, or throws a ConfigError naming the server that holds it. */
export function lockDataDir(dataDir: string): FileLock {
  fs.mkdirSync(dataDir, { recursive: true });
  const file = path.join(dataDir, "server.lock");
  const lock = tryLock(file, { startedAt: new Date().toISOString() });
  if (lock) return lock;
  const holder = lockHolder(file);
  throw new ConfigError(
    `the data dir ${dataDir} is in use by another Fount server${holder ? ` (pid ${holder.pid})` : ""}; stop that one first, or set FOUNT_DATA_DIR to another folder`,
  );
}
