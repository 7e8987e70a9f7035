/**
 * Component egress follows the policy: by default component code cannot connect to loopback or
 * private addresses (Fount's own API, a local database, the metadata service), enforced below the
 * JavaScript layer when the server runs as root; FOUNT_EXECUTOR_ALLOW_PRIVATE and
 * FOUNT_EXECUTOR_ALLOW_HOSTS open it.
 */
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, test } from "node:test";
import { deploy, fixture, hit } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

const root = process.getuid?.() === 0;
let target: net.Server;
let port: number;

before(async () => {
  // A local service a component should not reach: it stands for Fount's API, PostgreSQL, …
  target = net.createServer((socket) => socket.end());
  await new Promise<void>((resolve) => target.listen(0, "127.0.0.1", resolve));
  port = (target.address() as net.AddressInfo).port;
});
after(() => new Promise<void>((resolve) => target.close(() => resolve())));

async function probe(server: TestServer, host: string): Promise<{ outcome: string; uid: number }> {
  const source = await deploy(server, { component_code: fixture("egress-probe.mjs") });
  const res = await hit(`${source.configured_props.http.endpoint_url}?host=${host}&port=${port}`, {
    method: "POST",
  });
  assert.equal(res.status, 200, res.text);
  return res.body;
}

test("by default component code cannot connect to a loopback service", {
  skip: !root && "needs root",
}, async () => {
  const server = await startServer();
  try {
    const { outcome } = await probe(server, "127.0.0.1");
    assert.notEqual(outcome, "connected");
    assert.equal(outcome, "ECONNREFUSED", "refused by the firewall at once, not timed out");
    // The server itself (another uid) still reaches the same service.
    await new Promise<void>((resolve, reject) =>
      net
        .connect(port, "127.0.0.1")
        .on("connect", function (this: net.Socket) {
          this.destroy();
          resolve();
        })
        .on("error", reject),
    );
  } finally {
    await server.close();
  }
});

test("the firewall rules of a server are removed when it stops", {
  skip: !root && "needs root",
}, async () => {
  const server = await startServer();
  const { uid } = await probe(server, "127.0.0.1");
  await server.close();
  const { execFileSync } = await import("node:child_process");
  const tables = execFileSync("nft", ["list", "tables"], { encoding: "utf8" });
  const range = Math.floor(uid / 100_000) * 100_000;
  assert.doesNotMatch(tables, new RegExp(`fount_${range}\\b`));
});

test("FOUNT_EXECUTOR_ALLOW_PRIVATE=true lets component code connect to loopback", async () => {
  const server = await startServer({}, { FOUNT_EXECUTOR_ALLOW_PRIVATE: "true" });
  try {
    assert.equal((await probe(server, "127.0.0.1")).outcome, "connected");
  } finally {
    await server.close();
  }
});

test("FOUNT_EXECUTOR_ALLOW_HOSTS opens the listed addresses only", {
  skip: !root && "needs root",
}, async () => {
  const server = await startServer({}, { FOUNT_EXECUTOR_ALLOW_HOSTS: "127.0.0.2/32" });
  const other = net.createServer((socket) => socket.end());
  await new Promise<void>((resolve) => other.listen(port, "127.0.0.2", resolve));
  try {
    // The target listens on 127.0.0.1 only; 127.0.0.2 has its twin on the same port.
    assert.equal((await probe(server, "127.0.0.2")).outcome, "connected");
    assert.equal((await probe(server, "127.0.0.1")).outcome, "ECONNREFUSED");
  } finally {
    await new Promise<void>((resolve) => other.close(() => resolve()));
    await server.close();
  }
});
