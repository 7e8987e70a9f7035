/**
 * `npm run cluster:demo` (scripts/cluster-demo.ts) as a user runs it: its nodes come up on one
 * PostgreSQL schema, each printing its own addresses (node 2 and 3 printed node 1's before), and Ctrl-C
 * stops them all.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { unmountScratchUnder } from "../helpers.ts";
import { dropSchema, freshSchema, schemaUrl } from "../pg-schemas.ts";
import { repoRoot, START_TIMEOUT_MS } from "../process/server-process.ts";

const schema = freshSchema("fount_demo_test");
const dir = mkdtempSync(path.join(os.tmpdir(), "fount-demo-"));
// Executors (under uids of their own, as root) must reach the nodes' data dirs in it.
chmodSync(dir, 0o755);
after(async () => {
  await dropSchema(schema);
  for (const node of ["node1", "node2"]) unmountScratchUnder(path.join(dir, node));
  rmSync(dir, { recursive: true, force: true });
});

/** Whether `port` can be listened on now, on 127.0.0.1. */
function free(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = net.createServer();
    probe.once("error", () => resolve(false));
    probe.listen(port, "127.0.0.1", () => probe.close(() => resolve(true)));
  });
}

/** A first port for two nodes: each takes FOUNT_DEMO_PORT + i, and 100 above that for its endpoints. */
async function portsForTwo(): Promise<number> {
  for (;;) {
    const port = 20_000 + Math.floor(Math.random() * 40_000);
    const all = [port, port + 1, port + 100, port + 101];
    if ((await Promise.all(all.map(free))).every(Boolean)) return port;
  }
}

test("the cluster demo's nodes each print their own address, and Ctrl-C stops them", async () => {
  const port = await portsForTwo();
  const { PUBLIC_URL: _public, FOUNT_ENDPOINT_URL: _endpoints, ...env } = process.env;
  const demo = spawn(process.execPath, ["scripts/cluster-demo.ts"], {
    cwd: repoRoot,
    env: {
      ...env,
      DATABASE_URL: schemaUrl(schema),
      FOUNT_DEMO_NODES: "2",
      FOUNT_DEMO_PORT: String(port),
      FOUNT_DEMO_DIR: dir,
      FOUNT_RATE_LIMIT: "0",
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  const closed = new Promise<number | null>((resolve) => demo.on("close", resolve));
  const bothListening = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`no start within ${START_TIMEOUT_MS} ms:\n${output}`)),
      START_TIMEOUT_MS,
    );
    const onData = (chunk: Buffer) => {
      output += chunk.toString("utf8");
      if ((output.match(/^\[node\d\] Source endpoints answer on /gm) ?? []).length >= 2) {
        clearTimeout(timer);
        resolve();
      }
    };
    demo.stdout.on("data", onData);
    demo.stderr.on("data", onData);
    void closed.then(() => reject(new Error(`the demo ended before its nodes listened:\n${output}`)));
  });
  try {
    await bothListening;
    for (const [i, name] of ["node1", "node2"].entries()) {
      const url = `http://127.0.0.1:${port + i}`;
      assert.match(output, new RegExp(`^\\[${name}\\] Fount is listening on ${url} `, "m"), output);
      const endpoints = `http://127.0.0.1:${port + 100 + i}/e/`;
      assert.match(output, new RegExp(`^\\[${name}\\] Source endpoints answer on ${endpoints}`, "m"), output);
      // And that address is the node's: it answers there.
      assert.equal((await fetch(`${url}/healthz`)).status, 200);
    }
  } finally {
    // Ctrl-C in a terminal reaches the demo as SIGINT.
    demo.kill("SIGINT");
  }
  assert.equal(await closed, 0, output);
  assert.match(output, /^\[node1\] exited \(0\)$/m);
  assert.match(output, /^\[node2\] exited \(0\)$/m);
});
