/**
 * `fount admin backup <file>` and `fount admin restore <file>`: the SQLite store copied while the server
 * runs, and put back into an empty data dir. The copy is SQLite's `VACUUM INTO`, one read transaction
 * over the whole database: consistent (every commit before it, none after), compact, and taken beside a
 * server that keeps writing (WAL readers never block the writer). PostgreSQL stores are backed up with
 * pg_dump (docs/operations.md). Secrets in the store are sealed with the encryption key, which is not in
 * the copy: `--with-key` copies it beside the backup, and `restore --key` puts it back.
 */
import {
  chmodSync,
  copyFileSync,
  existsSync,
  linkSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import path from "node:path";
import { CliError, type Command, type Context } from "./command.ts";
import { serverConfig } from "./server-config.ts";

const storeFile = "fount.db";
const keyFile = "secret.key";

/** Whether anything is at `file`, a symbolic link included (even one pointing nowhere). */
function taken(file: string): boolean {
  try {
    lstatSync(file);
    return true;
  } catch {
    return false;
  }
}

/**
 * Puts `staged` at `target` only if nothing is there (a file, or a link another user planted since the
 * check): a hard link fails on any existing name. A file system without hard links (FAT) gets a rename.
 */
function placeNew(staged: string, target: string): void {
  try {
    linkSync(staged, target);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "EEXIST") throw new CliError(`${target} exists: choose a new file`, "file_exists");
    if (taken(target)) throw err;
    renameSync(staged, target);
  }
}

/** The data dir of a SQLite store; PostgreSQL has its own tools. */
async function sqliteDataDir(ctx: Context): Promise<string> {
  const config = await serverConfig(ctx);
  if (config.databaseUrl) {
    throw new CliError(
      "DATABASE_URL is set: back up a PostgreSQL store with pg_dump, and restore it with pg_restore (docs/operations.md)",
      "not_sqlite",
      2,
    );
  }
  return config.dataDir;
}

export const backup: Command = {
  name: "admin backup",
  summary: "Copy the SQLite store to a file, consistently, while the server runs",
  usage: "<file> [--with-key]",
  args: { min: 1, max: 1 },
  options: {
    "with-key": {
      type: "boolean",
      description:
        "Also copy the data dir's encryption key to <file>.key (0600, a new file): secrets need it",
    },
  },
  description:
    "The copy holds every commit made before it started. Keep the encryption key with it (FOUNT_ENCRYPTION_KEY, or the data dir's secret.key, which --with-key copies): without it, stored secrets cannot be opened.\n\nExample:\n  fount admin backup /backups/fount-$(date +%F).db --with-key",
  async run(ctx) {
    const target = path.resolve(ctx.arg(0, "<file>"));
    const dataDir = await sqliteDataDir(ctx);
    const source = path.join(dataDir, storeFile);
    if (!existsSync(source)) {
      throw new CliError(`No Fount store at ${source}: set FOUNT_DATA_DIR as for the server`, "no_store");
    }
    const withKey = ctx.flags["with-key"] === true;
    const keyTarget = `${target}.key`;
    for (const file of withKey ? [target, keyTarget] : [target])
      if (taken(file)) throw new CliError(`${file} exists: choose a new file`, "file_exists");
    const keySource = path.join(dataDir, keyFile);
    if (withKey && !existsSync(keySource)) {
      throw new CliError(
        `No ${keySource}: the server takes its key from FOUNT_ENCRYPTION_KEY; keep that value with the backup`,
        "no_key",
      );
    }
    const { DatabaseSync } = await import("node:sqlite");
    const started = performance.now();
    // Written in a folder only this user may enter (0700) beside the target, then linked into place:
    // no other user can open the copy or the key while they are written, nor plant a file or a link
    // for them to be written through.
    const staging = mkdtempSync(path.join(path.dirname(target), `.${path.basename(target)}.`));
    try {
      const staged = path.join(staging, "backup.db");
      const db = new DatabaseSync(source, { readOnly: true });
      try {
        // The server may hold the write lock for a moment; a reader waits rather than fails.
        db.exec("PRAGMA busy_timeout = 10000");
        db.prepare("VACUUM INTO ?").run(staged);
      } catch (err) {
        throw new CliError(`The backup failed: ${(err as Error).message}`, "backup_failed");
      } finally {
        db.close();
      }
      chmodSync(staged, 0o600);
      const stagedKey = path.join(staging, "backup.key");
      // "wx": created here, never opened through something already there.
      if (withKey) writeFileSync(stagedKey, readFileSync(keySource), { flag: "wx", mode: 0o600 });
      placeNew(staged, target);
      if (withKey) {
        try {
          placeNew(stagedKey, keyTarget);
        } catch (err) {
          // The backup without its key is not what was asked for.
          unlinkSync(target);
          throw err;
        }
      }
    } finally {
      rmSync(staging, { recursive: true, force: true });
    }
    const bytes = statSync(target).size;
    const ms = Math.round(performance.now() - started);
    ctx.output({ file: target, bytes, ms, key: withKey ? `${target}.key` : null }, () => {
      ctx.print(`Backed up ${source} to ${target} (${(bytes / 1048576).toFixed(1)} MB in ${ms} ms).`);
      if (withKey) ctx.print(`The encryption key is in ${target}.key: keep it as safe as the backup.`);
      else
        ctx.print("Keep the encryption key (FOUNT_ENCRYPTION_KEY or secret.key) with it: secrets need it.");
    });
    return undefined;
  },
};

export const restore: Command = {
  name: "admin restore",
  summary: "Restore a backup into an empty data dir (the server stopped or not yet started there)",
  usage: "<file> [--key <file>]",
  args: { min: 1, max: 1 },
  options: {
    key: {
      type: "string",
      value: "<file>",
      description: "The encryption key saved with the backup (backup --with-key), installed as secret.key",
    },
  },
  description:
    "FOUNT_DATA_DIR must not hold a store yet. The file is checked (a SQLite database that is a Fount store this version can open; older ones are migrated) before it is put in place.\n\nExample:\n  FOUNT_DATA_DIR=/var/lib/fount fount admin restore /backups/fount-2026-11-24.db --key /backups/fount-2026-11-24.db.key",
  async run(ctx) {
    const file = path.resolve(ctx.arg(0, "<file>"));
    const dataDir = await sqliteDataDir(ctx);
    if (!existsSync(file)) throw new CliError(`No file ${file}`, "not_found");
    const target = path.join(dataDir, storeFile);
    if (existsSync(target) || existsSync(`${target}-wal`)) {
      throw new CliError(
        `${dataDir} already holds a store: restore into an empty data dir (set FOUNT_DATA_DIR), never over a live one`,
        "not_empty",
      );
    }
    const key = ctx.flags.key;
    const keyTarget = path.join(dataDir, keyFile);
    if (typeof key === "string") {
      if (!existsSync(key)) throw new CliError(`No key file ${key}`, "not_found");
      if (existsSync(keyTarget))
        throw new CliError(`${keyTarget} exists: leave it, or restore without --key`, "not_empty");
    }
    // Checked as a copy in the data dir, then renamed into place: a bad file leaves nothing behind.
    const staging = path.join(dataDir, `${storeFile}.restoring`);
    const { openSqliteStorage } = await import("../storage/sqlite/driver.ts");
    // Opening the copy writes an event search index file beside it: removed, the server makes its own.
    const { indexFileOf, removeIndexFile } = await import("../storage/sqlite/search-indexer.ts");
    try {
      await checkDatabase(file);
      mkdirSync(dataDir, { recursive: true });
      copyFileSync(file, staging);
      const store = openSqliteStorage({ dataDir, file: staging });
      const users = await store.countUsers();
      await store.close();
      for (const suffix of ["-wal", "-shm"]) rmSync(staging + suffix, { force: true });
      removeIndexFile(indexFileOf(staging));
      renameSync(staging, target);
      chmodSync(target, 0o600);
      if (typeof key === "string") {
        copyFileSync(key, keyTarget);
        chmodSync(keyTarget, 0o600);
      }
      ctx.output({ file: target, users }, () => {
        ctx.print(`Restored ${file} into ${target} (${users} user(s)). Start the server with this data dir.`);
        if (typeof key !== "string" && !existsSync(keyTarget)) {
          ctx.print(
            "No secret.key here: start the server with the FOUNT_ENCRYPTION_KEY the backup's server used.",
          );
        }
      });
    } catch (err) {
      for (const suffix of ["", "-wal", "-shm"]) rmSync(staging + suffix, { force: true });
      removeIndexFile(indexFileOf(staging));
      if (err instanceof CliError) throw err;
      throw new CliError(`${file} cannot be restored: ${(err as Error).message}`, "restore_failed");
    }
    return undefined;
  },
};

/** Refuses a file that is not a sound SQLite database holding a Fount store. */
async function checkDatabase(file: string): Promise<void> {
  const { DatabaseSync } = await import("node:sqlite");
  let db: InstanceType<typeof DatabaseSync>;
  try {
    db = new DatabaseSync(file, { readOnly: true });
  } catch (err) {
    throw new CliError(`${file} is not a SQLite database: ${(err as Error).message}`, "not_a_store");
  }
  try {
    const check = db.prepare("PRAGMA quick_check").get() as { quick_check?: string } | undefined;
    if (check?.quick_check !== "ok") throw new Error(`quick_check: ${check?.quick_check ?? "no answer"}`);
    const table = db
      .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'sources'")
      .get();
    if (!table) throw new Error("it has no Fount tables");
  } catch (err) {
    throw new CliError(`${file} is not a Fount store: ${(err as Error).message}`, "not_a_store");
  } finally {
    db.close();
  }
}
