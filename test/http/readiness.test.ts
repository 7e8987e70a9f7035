/** /readyz says "ready" only while the store answers and executors can run. */
import assert from "node:assert/strict";
import { chmodSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { startServer } from "../helpers.ts";

test("/readyz is not ready once executors can no longer reach the data dir", {
  skip: process.getuid?.() !== 0 && "needs root (executors under uids of their own)",
}, async () => {
  const parent = mkdtempSync(path.join(os.tmpdir(), "fount-ready-"));
  chmodSync(parent, 0o755);
  const dataDir = path.join(parent, "data");
  mkdirSync(dataDir);
  const server = await startServer({ dataDir });
  try {
    const ready = await server.api("GET", "/readyz", { key: null });
    assert.equal(ready.status, 200);
    assert.equal(ready.body.status, "ready");
    // An operator tightens the folder above the data dir while the server runs.
    chmodSync(parent, 0o700);
    const after = await server.api("GET", "/readyz", { key: null });
    assert.equal(after.status, 503);
    assert.match(after.body.status, new RegExp(`executors cannot run: .*${parent} is not searchable`));
  } finally {
    await server.close();
    rmSync(parent, { recursive: true, force: true });
  }
});
