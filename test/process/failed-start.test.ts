/**
 * A start that fails part-way closes what it had opened (app.ts): a process that embeds Fount and
 * catches the error exits on its own, and the host's uid claims are left as they were.
 */
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { claimUidRange } from "../../src/runtime/uid-range.ts";
import { runNode } from "../helpers.ts";

const root = process.getuid?.() === 0;
const src = (file: string) => JSON.stringify(new URL(`../../src/${file}`, import.meta.url).href);

test("a start refused after the store opened closes the store: the embedding process exits", {
  skip: !root && "needs root (executors under uids of their own)",
}, async () => {
  // This process holds a range; the embedded start asks for it exactly, after its store has opened.
  const base = 800_000_000 + (process.pid % 1000) * 100_000;
  const held = claimUidRange({ dataDir: "held", base });
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-failed-start-"));
  const script = `
    const { loadConfig } = await import(${src("config.ts")});
    const { buildApp } = await import(${src("app.ts")});
    const config = loadConfig(
      { FOUNT_EXECUTOR_UID_BASE: "${base}", FOUNT_RATE_LIMIT: "0" },
      { dataDir: ${JSON.stringify(dataDir)}, port: 0, endpointPort: 0 },
    );
    try {
      await buildApp(config, { logger: false, publishRegistry: false });
      console.log("started");
    } catch (err) {
      console.log("refused: " + err.message);
    }
  `;
  try {
    // A file, not `node -e`: a process evaluating `-e` exited with the store still open, hiding the leak.
    const file = path.join(dataDir, "embed.mjs");
    writeFileSync(file, script);
    // Exiting is the point; the minute only bounds a process that would otherwise wait forever.
    const { code, out, err } = await runNode([file], 60_000);
    assert.equal(
      code,
      0,
      `the process was still running a minute after its start was refused:\n${out}${err}`,
    );
    assert.match(
      out,
      new RegExp(`refused: FOUNT_EXECUTOR_UID_BASE=${base}: uids .* belong to another Fount server`),
    );
  } finally {
    held.release();
  }
});
