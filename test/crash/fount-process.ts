/**
 * The real server (`src/main.ts`) as a process for the crash tests: started on the environment a test
 * gives (its store, ports and key), and resolved once /readyz answers 200. The first admin and its key
 * are stored only after the port is bound, so /healthz came too early: a first request could meet
 * "Unknown or revoked API key". Every process started is killed when the test file ends.
 */

import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import os from "node:os";
import path from "node:path";
import { after } from "node:test";

const root = path.resolve(import.meta.dirname, "../..");
const node = path.join(root, "node_modules/.bin/node");
/** Bounds only a hang: the machine may be loaded by other work. */
const startWaitMs = 180_000;

const children = new Set<ChildProcess>();
after(() => {
  for (const child of children) child.kill("SIGKILL");
});

/** A started server: its process, its exit, and what it printed. */
export interface FountChild {
  child: ChildProcess;
  exited: Promise<void>;
  output: () => string;
}

/** Starts `src/main.ts` with `env` (which names `PORT`) added to a minimal environment. */
export async function startFount(env: Record<string, string>): Promise<FountChild> {
  const child = spawn(node, ["src/main.ts"], {
    cwd: root,
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      FOUNT_NPM_CACHE: path.join(os.tmpdir(), "fount-test-npm-cache"),
      HOST: "127.0.0.1",
      FOUNT_WEBHOOK_ALLOW_PRIVATE: "true",
      FOUNT_RATE_LIMIT: "0",
      LOG_LEVEL: "warn",
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.add(child);
  let gone = false;
  const exited = new Promise<void>((resolve) =>
    child.once("exit", () => {
      gone = true;
      children.delete(child);
      resolve();
    }),
  );
  let out = "";
  child.stdout!.on("data", (d) => {
    out += d;
  });
  child.stderr!.on("data", (d) => {
    out += d;
  });
  const deadline = Date.now() + startWaitMs;
  for (;;) {
    if (gone) throw new Error(`fount exited (${child.exitCode ?? child.signalCode}): ${out}`);
    const ok = await fetch(`http://127.0.0.1:${env.PORT}/readyz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) return { child, exited, output: () => out };
    if (Date.now() > deadline) throw new Error(`fount did not start: ${out}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * Waits until every acknowledged key has reached the receiver (`received` counts arrivals per key), failing
 * with the first missing ones after `waitMs`; answers how many keys arrived more than once.
 */
export async function allReceived(
  acked: string[],
  received: Map<string, number>,
  waitMs: number,
  what: string,
): Promise<number> {
  const deadline = Date.now() + waitMs;
  while (acked.some((k) => !received.has(k))) {
    if (Date.now() > deadline) {
      const missing = acked.filter((k) => !received.has(k));
      assert.fail(
        `${missing.length} acknowledged ${what} never reached the receiver: ${missing.slice(0, 10).join(", ")}`,
      );
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return [...received.values()].filter((c) => c > 1).length;
}
