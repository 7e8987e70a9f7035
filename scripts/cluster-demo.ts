/**
 * `npm run cluster:demo`: three Fount nodes on this machine's PostgreSQL, to try a cluster. Each node
 * is `node src/main.ts` with its own ports (the API's, and 100 above it its endpoints') and data dir and
 * the same DATABASE_URL and encryption key; their output is prefixed with the node's name. Ctrl-C stops
 * them.
 *
 * Settings (environment): DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test with the schema
 * `fount_demo`), FOUNT_DEMO_NODES (3), FOUNT_DEMO_PORT (the first node's port, 3101), FOUNT_DEMO_DIR
 * (.fount-cluster), PUBLIC_URL and FOUNT_ENDPOINT_URL (unset, each node's URLs name that node; set them
 * to the addresses of a load balancer in front, and every node names those). The first start creates
 * the admin and prints its key; later starts reuse the store.
 */
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../", import.meta.url));
const count = Number(process.env.FOUNT_DEMO_NODES ?? 3);
const firstPort = Number(process.env.FOUNT_DEMO_PORT ?? 3101);
const dir = path.resolve(root, process.env.FOUNT_DEMO_DIR ?? ".fount-cluster");
const databaseUrl =
  process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test?options=-c%20search_path%3Dfount_demo";

mkdirSync(dir, { recursive: true });
// Every node must open the same secrets: one key, kept beside the nodes' data dirs.
const keyFile = path.join(dir, "encryption-key");
if (!existsSync(keyFile)) writeFileSync(keyFile, randomBytes(32).toString("base64"), { mode: 0o600 });
const encryptionKey = process.env.FOUNT_ENCRYPTION_KEY ?? readFileSync(keyFile, "utf8").trim();

const children = Array.from({ length: count }, (_, i) => {
  const name = `node${i + 1}`;
  const port = firstPort + i;
  const child = spawn(process.execPath, ["src/main.ts"], {
    cwd: root,
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl,
      FOUNT_ENCRYPTION_KEY: encryptionKey,
      FOUNT_DATA_DIR: path.join(dir, name),
      FOUNT_NODE_ID: name,
      PORT: String(port),
      FOUNT_ENDPOINT_PORT: String(port + 100),
      // The addresses clients use for this node: it prints them, and builds endpoint URLs from them.
      // Any node serves every source, so each may name itself; behind a load balancer, all name that.
      PUBLIC_URL: process.env.PUBLIC_URL ?? `http://127.0.0.1:${port}`,
      FOUNT_ENDPOINT_URL: process.env.FOUNT_ENDPOINT_URL ?? `http://127.0.0.1:${port + 100}`,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const prefix = (stream: NodeJS.WritableStream) => (chunk: Buffer) => {
    for (const line of chunk.toString("utf8").split("\n")) if (line) stream.write(`[${name}] ${line}\n`);
  };
  child.stdout.on("data", prefix(process.stdout));
  child.stderr.on("data", prefix(process.stderr));
  child.on("exit", (code, signal) => {
    process.stdout.write(`[${name}] exited (${signal ?? code})\n`);
  });
  return child;
});

process.stdout.write(
  `Starting ${count} Fount nodes on ${databaseUrl.replace(/\/\/[^@]*@/, "//")}: ${children
    .map((_, i) => `http://127.0.0.1:${firstPort + i}`)
    .join(", ")}\nCtrl-C stops them.\n`,
);

let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  for (const c of children) c.kill("SIGTERM");
};
process.on("SIGINT", stop);
process.on("SIGTERM", stop);
await Promise.all(children.map((c) => new Promise((r) => c.on("close", r))));
