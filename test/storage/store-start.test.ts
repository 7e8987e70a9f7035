/**
 * The real process (`src/main.ts`) and its store: `DATABASE_URL` starts it on PostgreSQL, and a store
 * that cannot be used (PostgreSQL unreachable, a store written by a newer Fount) stops the start with
 * one line and a non-zero exit.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { DatabaseSync } from "node:sqlite";
import { test } from "node:test";
import pg from "pg";
import { openSqliteStorage } from "../../src/storage/sqlite/driver.ts";
import { freePorts } from "../helpers.ts";
import { dropSchema, freshSchema, schemaUrl, testPgUrl } from "../pg-schemas.ts";

const root = path.resolve(import.meta.dirname, "../..");
const nodeBin = path.join(root, "node_modules/.bin/node");
const adminKey = "fnt_teststartkey00000000000000000000";
// Bounds only the wait for the child process, generously (a cold start compiles TypeScript on the fly).
const processTimeoutMs = 60_000;

/** Starts `src/main.ts` with a clean environment plus `extra`. */
async function start(extra: Record<string, string>) {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (!name.startsWith("FOUNT_") && !["PORT", "HOST", "PUBLIC_URL", "DATABASE_URL"].includes(name))
      env[name] = value;
  }
  const [port, endpointPort] = await freePorts(2);
  Object.assign(env, {
    PORT: String(port),
    FOUNT_ENDPOINT_PORT: String(endpointPort),
    HOST: "127.0.0.1",
    LOG_LEVEL: "warn",
    ...extra,
  });
  const child = spawn(nodeBin, ["src/main.ts"], { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d) => {
    stdout += d;
  });
  child.stderr.on("data", (d) => {
    stderr += d;
  });
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  const timer = setTimeout(() => child.kill("SIGKILL"), processTimeoutMs);
  exited.finally(() => clearTimeout(timer));
  return { child, exited, url: `http://127.0.0.1:${port}`, out: () => stdout, err: () => stderr };
}

test("DATABASE_URL with PostgreSQL unreachable: one line on stderr and exit code 1", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-start-"));
  try {
    const fount = await start({
      FOUNT_DATA_DIR: dataDir,
      DATABASE_URL: "postgres://postgres:secret@127.0.0.1:1/fount",
    });
    assert.equal(await fount.exited, 1);
    const lines = fount.err().trimEnd().split("\n");
    assert.equal(lines.length, 1, fount.err());
    assert.match(lines[0]!, /^fount: cannot reach PostgreSQL at 127\.0\.0\.1:1\/fount: /);
    assert.doesNotMatch(lines[0]!, /secret/);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test("a SQLite store written by a newer Fount: one line on stderr and exit code 1", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-start-"));
  try {
    await openSqliteStorage({ dataDir }).close();
    const db = new DatabaseSync(path.join(dataDir, "fount.db"));
    db.exec("INSERT INTO schema_migrations VALUES (999, '999-future.sql', 0)");
    db.close();
    const fount = await start({ FOUNT_DATA_DIR: dataDir });
    assert.equal(await fount.exited, 1);
    assert.match(
      fount.err(),
      /^fount: the SQLite store was written by a newer Fount \(schema version 999; this build knows up to \d+\): upgrade Fount, or point it at another store\n$/,
    );
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test("DATABASE_URL=postgres://… starts on PostgreSQL: the admin made at first start is stored there", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-start-"));
  const schema = freshSchema();
  const client = new pg.Client({ connectionString: testPgUrl });
  await client.connect();
  try {
    await client.query(`CREATE SCHEMA "${schema}"`);
    const fount = await start({
      FOUNT_DATA_DIR: dataDir,
      DATABASE_URL: schemaUrl(schema),
      FOUNT_BOOTSTRAP_API_KEY: adminKey,
    });
    try {
      // Wait for the listening line, or the exit of a failed start.
      await new Promise<void>((resolve, reject) => {
        const check = setInterval(() => {
          if (fount.out().includes("Fount is listening")) {
            clearInterval(check);
            resolve();
          }
        }, 50);
        fount.exited.then((code) => {
          clearInterval(check);
          reject(new Error(`exited ${code}: ${fount.err()}`));
        });
      });
      const res = await fetch(`${fount.url}/v1/users/me`, {
        headers: { authorization: `Bearer ${adminKey}` },
      });
      assert.equal(res.status, 200);
      const me = (await res.json()) as { data: { id: string; username: string } };
      const { rows } = await client.query(`SELECT id, username FROM "${schema}".users`);
      assert.deepEqual(rows, [{ id: me.data.id, username: me.data.username }]);
    } finally {
      fount.child.kill("SIGTERM");
      assert.equal(await fount.exited, 0);
    }
  } finally {
    await client.end();
    await dropSchema(schema);
    rmSync(dataDir, { recursive: true, force: true });
  }
});
