/**
 * The server's own files in the data dir are closed to every other uid (docs/isolation.md, "Server
 * files"): executors run under uids of their own, so the kernel refuses them these files even if Node's
 * permission model were bypassed. A key file an operator or an older version left readable is narrowed
 * at start.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { startServer } from "../helpers.ts";

/** What a process under an unused uid gets when it reads `file` (as an executor would): "EACCES" or the text. */
function readAsStranger(file: string): string {
  const probe = `try { console.log(require("fs").readFileSync(${JSON.stringify(file)}, "utf8").length) } catch (e) { console.log(e.code) }`;
  return execFileSync(process.execPath, ["-e", probe], {
    env: {},
    uid: 1_999_997,
    gid: 1_999_997,
    encoding: "utf8",
  }).trim();
}

test("a secret.key left readable by others is narrowed to 0600 at start, and no other uid reads it", async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "fount-files-"));
  fs.chmodSync(dataDir, 0o711);
  const key = path.join(dataDir, "secret.key");
  fs.writeFileSync(key, randomBytes(32).toString("base64"));
  fs.chmodSync(key, 0o644);
  const server = await startServer({ dataDir });
  try {
    assert.equal((await server.api("GET", "/v1/users/me")).status, 200);
    assert.equal(fs.statSync(key).mode & 0o777, 0o600);
    if (process.getuid?.() === 0) assert.equal(readAsStranger(key), "EACCES");
  } finally {
    await server.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});

test("the SQLite store and its event search index file, with their -wal and -shm, are 0600 and closed to other uids", async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "fount-files-"));
  const server = await startServer({ dataDir });
  try {
    const source = await server.api("POST", "/v1/sources", {
      body: {
        component_code:
          "export default { name: 'files', version: '0.0.1', run() { this.$emit({ word: 'findable' }) } }",
        name: "files",
      },
    });
    assert.equal(source.status, 200, source.text);
    assert.equal(
      (await server.api("POST", `/v1/sources/${source.body.data.id}/run`, { body: {} })).status,
      200,
    );
    // A search has the index worker write the index file, so that its -wal and -shm exist.
    const found = await server.api("GET", `/v1/sources/${source.body.data.id}/event_summaries?q=findable`);
    assert.equal(found.status, 200, found.text);
    assert.equal(found.body.data.length, 1);
    const files = fs.readdirSync(dataDir).filter((f) => /^fount(-search)?\.db(-wal|-shm)?$/.test(f));
    for (const name of ["fount.db", "fount.db-wal", "fount-search.db", "fount-search.db-wal"])
      assert.ok(files.includes(name), `${name} in ${files.join(", ")}`);
    for (const name of files) {
      assert.equal(fs.statSync(path.join(dataDir, name)).mode & 0o777, 0o600, name);
      if (process.getuid?.() === 0) assert.equal(readAsStranger(path.join(dataDir, name)), "EACCES", name);
    }
  } finally {
    await server.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});
