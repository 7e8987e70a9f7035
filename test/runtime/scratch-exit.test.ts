/**
 * A process that exits without closing its executor pools (a second Ctrl-C, `process.exit`) unmounts
 * their owners' scratch tmpfs on its way out (runtime/executors/scratch.ts), with one `exit` listener
 * however many pools it opened: a listener per pool made Node warn of a leak past ten.
 */
import assert from "node:assert/strict";
import { mkdtempSync, realpathSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { mountsUnder } from "../../src/runtime/executors/scratch.ts";
import { runNode } from "../helpers.ts";

const moduleUrl = new URL("../../src/runtime/executors/scratch.ts", import.meta.url).href;
const base = realpathSync(mkdtempSync(path.join(os.tmpdir(), "fount-scratch-exit-")));
after(() => rmSync(base, { recursive: true, force: true }));

test("twelve pools, three closed, then process.exit: no listener warning, and no scratch mount is left", async () => {
  const script = `
    import { mkdirSync } from "node:fs";
    const { ScratchLimit, mountsUnder } = await import(${JSON.stringify(moduleUrl)});
    const base = ${JSON.stringify(base)};
    const pools = [];
    for (let i = 0; i < 12; i++) {
      mkdirSync(base + "/root" + i + "/owner", { recursive: true });
      const pool = new ScratchLimit(1);
      await pool.resetRoot(base + "/root" + i);
      pools.push(pool);
    }
    // Mounted (as root) in an open pool and in one closed afterwards, which its close unmounts.
    await pools[0].attach(base + "/root0/owner", undefined);
    await pools[11].attach(base + "/root11/owner", undefined);
    for (const pool of pools.slice(9)) await pool.detachAll();
    console.log(JSON.stringify({ mode: pools[0].current, mounted: mountsUnder(base) }));
    process.exit(0);
  `;
  const run = await runNode(["--input-type=module", "-e", script], 60_000);
  assert.equal(run.code, 0, run.err);
  assert.doesNotMatch(run.err, /MaxListenersExceededWarning/);
  const seen = JSON.parse(run.out) as { mode: string; mounted: string[] };
  if (seen.mode === "tmpfs") assert.deepEqual(seen.mounted, [path.join(base, "root0", "owner")]);
  else assert.deepEqual(seen.mounted, []);
  assert.deepEqual(mountsUnder(base), [], "the exit unmounted what the open pools had mounted");
});
