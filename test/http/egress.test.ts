/**
 * Component egress follows the policy: by default component code cannot connect to loopback or
 * private addresses (Fount's own API, a local database, the metadata service) nor to Unix sockets.
 * Two layers refuse it: a check inside the executor, which explains the refusal, and, as root, an
 * nftables rule on the server's executor uids that holds even if the JavaScript layer were bypassed.
 * FOUNT_EXECUTOR_ALLOW_PRIVATE and FOUNT_EXECUTOR_ALLOW_HOSTS open it.
 */
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import net from "node:net";
import { after, before, test } from "node:test";
import { deploy, fixture, hit } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

const root = process.getuid?.() === 0;
const hasNft = (() => {
  try {
    execFileSync("nft", ["--version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
})();
// The kernel layer needs root and nftables; CI installs nftables (.ci/run), so there these run or fail.
const needsFirewall = {
  skip: !root ? "needs root" : !hasNft && !process.env.CI && "needs nft (apt-get install nftables)",
};
let target: net.Server;
let port: number;

before(async () => {
  // A local service a component should not reach: it stands for Fount's API, PostgreSQL, …
  target = net.createServer((socket) => socket.end());
  await new Promise<void>((resolve) => target.listen(0, "127.0.0.1", resolve));
  port = (target.address() as net.AddressInfo).port;
});
after(() => new Promise<void>((resolve) => target.close(() => resolve())));

interface Probe {
  outcome: string;
  message: string;
  uid: number;
}

async function probe(server: TestServer, query: string): Promise<Probe> {
  const source = await deploy(server, { component_code: fixture("egress-probe.mjs") });
  const res = await hit(`${source.configured_props.http.endpoint_url}?${query}`, { method: "POST" });
  assert.equal(res.status, 200, res.text);
  return res.body;
}

/** What a plain Node process (no Fount code at all) running under `uid` gets when it connects to the target. */
function connectAs(uid: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const script = `require("net").connect(${port}, "127.0.0.1")
      .on("connect", () => { console.log("connected"); process.exit(0); })
      .on("error", (e) => { console.log(e.code); process.exit(0); })
      .setTimeout(10000, () => { console.log("timeout"); process.exit(0); });`;
    const proc = spawn(process.execPath, ["-e", script], {
      uid,
      gid: uid,
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    proc.stdout.on("data", (c: Buffer) => {
      out += c.toString();
    });
    proc.on("error", reject);
    proc.on("close", () => resolve(out.trim()));
  });
}

test("by default component code cannot connect to a loopback service, and is told why", async () => {
  const server = await startServer();
  try {
    const { outcome, message } = await probe(server, `host=127.0.0.1&port=${port}`);
    assert.equal(outcome, "EGRESS_REFUSED");
    assert.match(message, /refused to connect to 127\.0\.0\.1: .*FOUNT_EXECUTOR_ALLOW_PRIVATE/);
    // A name that resolves to loopback is refused on its address.
    assert.equal((await probe(server, `host=localhost&port=${port}`)).outcome, "EGRESS_REFUSED");
  } finally {
    await server.close();
  }
});

test(
  "as root, the server's executor uids are refused loopback by the kernel too",
  needsFirewall,
  async () => {
    const server = await startServer();
    try {
      const { uid } = await probe(server, `host=127.0.0.1&port=${port}`);
      assert.ok(uid > 0, `executors run under a uid of their own, got ${uid}`);
      // Below JavaScript: a plain process under the executor's uid is refused at once by the firewall…
      assert.equal(await connectAs(uid), "ECONNREFUSED");
      // …while other uids of the host (here nobody, 65534) are untouched by the rules.
      assert.equal(await connectAs(65534), "connected");
    } finally {
      await server.close();
    }
  },
);

test("component code cannot connect to a Unix socket such as a local database's", async () => {
  const server = await startServer();
  try {
    const path = existsSync("/var/run/postgresql/.s.PGSQL.5432")
      ? "/var/run/postgresql/.s.PGSQL.5432"
      : "/dev/log";
    const { outcome, message } = await probe(server, `path=${encodeURIComponent(path)}`);
    assert.equal(outcome, "EGRESS_REFUSED", message);
    assert.match(message, /Unix socket/);
  } finally {
    await server.close();
  }
});

test("the firewall rules of a server are removed when it stops", needsFirewall, async () => {
  const server = await startServer();
  let table: string;
  const tables = () => execFileSync("nft", ["list", "tables"], { encoding: "utf8" }).split("\n");
  try {
    const { uid } = await probe(server, `host=127.0.0.1&port=${port}`);
    // Named after the range and the server's pid, so another server's table never looks like this one.
    table = `fount_${Math.floor(uid / 100_000) * 100_000}_${process.pid}`;
    assert.ok(tables().includes(`table inet ${table}`), tables().join("\n"));
  } finally {
    await server.close();
  }
  assert.ok(!tables().includes(`table inet ${table}`), tables().join("\n"));
});

test("FOUNT_EXECUTOR_ALLOW_PRIVATE=true lets component code connect to loopback", async () => {
  const server = await startServer({}, { FOUNT_EXECUTOR_ALLOW_PRIVATE: "true" });
  try {
    assert.equal((await probe(server, `host=127.0.0.1&port=${port}`)).outcome, "connected");
  } finally {
    await server.close();
  }
});

test("FOUNT_EXECUTOR_ALLOW_HOSTS opens the listed addresses only", async () => {
  const server = await startServer({}, { FOUNT_EXECUTOR_ALLOW_HOSTS: "127.0.0.2/32" });
  const twin = net.createServer((socket) => socket.end());
  await new Promise<void>((resolve) => twin.listen(port, "127.0.0.2", resolve));
  try {
    assert.equal((await probe(server, `host=127.0.0.2&port=${port}`)).outcome, "connected");
    assert.equal((await probe(server, `host=127.0.0.1&port=${port}`)).outcome, "EGRESS_REFUSED");
  } finally {
    await new Promise<void>((resolve) => twin.close(() => resolve()));
    await server.close();
  }
});

test("without per-uid isolation the executor's own check still refuses loopback", async () => {
  const server = await startServer({ executorIsolateUsers: false });
  try {
    const { outcome, uid } = await probe(server, `host=127.0.0.1&port=${port}`);
    assert.equal(uid, process.getuid?.());
    assert.equal(outcome, "EGRESS_REFUSED");
  } finally {
    await server.close();
  }
});
