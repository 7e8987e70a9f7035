/**
 * Uid ranges claimed by servers that start and stop side by side (runtime/uid-range.ts): every claim
 * succeeds while ranges are released around it, and live servers never share a range.
 */
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { claimUidRange, FIRST_AUTO_UID, UID_RANGE_SIZE } from "../../src/runtime/uid-range.ts";
import { type NodeRun, runNode } from "../helpers.ts";

const moduleUrl = new URL("../../src/runtime/uid-range.ts", import.meta.url).href;

/** A process that claims and releases a range `times` times; prints the bases it got, or dies with the error. */
function claimer(claimsDir: string, times: number): Promise<NodeRun> {
  const script = `
    const { claimUidRange } = await import(${JSON.stringify(moduleUrl)});
    const bases = [];
    for (let i = 0; i < ${times}; i++) {
      const range = claimUidRange({ dataDir: "d" + process.pid, claimsDir: ${JSON.stringify(claimsDir)} });
      bases.push(range.base);
      range.release();
    }
    console.log(JSON.stringify(bases));
  `;
  return runNode(["--input-type=module", "-e", script], 60_000);
}

test("servers that claim and release ranges side by side all get one, never one a live server holds", async () => {
  const claimsDir = mkdtempSync(path.join(os.tmpdir(), "fount-uids-"));
  // A live server keeps the first range all along: the others must step over it.
  const held = claimUidRange({ dataDir: "held", claimsDir });
  try {
    assert.equal(held.base, FIRST_AUTO_UID);
    const runs = await Promise.all([...Array.from({ length: 4 }, () => claimer(claimsDir, 200))]);
    for (const run of runs) {
      assert.equal(run.code, 0, run.err);
      const bases = JSON.parse(run.out) as number[];
      assert.equal(bases.length, 200);
      for (const base of bases) {
        assert.ok(base > held.base, `${base} is not the held range`);
        assert.equal((base - FIRST_AUTO_UID) % UID_RANGE_SIZE, 0);
      }
    }
  } finally {
    held.release();
  }
  // Once released, the first range is free again.
  const again = claimUidRange({ dataDir: "again", claimsDir });
  assert.equal(again.base, FIRST_AUTO_UID);
  again.release();
});
