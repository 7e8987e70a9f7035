/**
 * Component egress follows the policy: by default component code cannot connect to loopback or
 * private addresses (Fount's own API, a local database, the metadata service) nor to Unix sockets.
 * Two layers refuse it: a check inside the executor, which explains the refusal, and, as root, an
 * nftables rule on the server's executor uids that holds even if the JavaScript layer were bypassed.
 * FOUNT_EXECUTOR_ALLOW_PRIVATE and FOUNT_EXECUTOR_ALLOW_HOSTS open it.
 */
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import dgram from "node:dgram";
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
/** Loopback UDP listeners a component should not reach either (a DNS server, statsd, …): what reached them. */
const udp = { v4: dgram.createSocket("udp4"), v6: dgram.createSocket({ type: "udp6", ipv6Only: true }) };
const received: string[] = [];

before(async () => {
  // A local service a component should not reach: it stands for Fount's API, PostgreSQL, …
  target = net.createServer((socket) => socket.end());
  await new Promise<void>((resolve) => target.listen(0, "127.0.0.1", resolve));
  port = (target.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => udp.v4.bind(0, "127.0.0.1", resolve));
  await new Promise<void>((resolve) => udp.v6.bind(0, "::1", resolve));
  for (const socket of [udp.v4, udp.v6]) {
    socket.on("message", (message) => {
      const text = message.toString("latin1");
      // A DNS query carries its name as labels: the resolver's probe asks for dns-resolver.example.
      received.push(text.includes("dns-resolver") ? "dns resolver" : text);
    });
  }
});
after(async () => {
  await new Promise<void>((resolve) => target.close(() => resolve()));
  udp.v4.close();
  udp.v6.close();
});

const udpPort = (family: "v4" | "v6") => (udp[family].address() as net.AddressInfo).port;

/**
 * The datagrams that reached the listeners since the last call. A marker sent from here afterwards is
 * awaited first: loopback delivers in order, so whatever the component sent before it has arrived.
 */
async function datagramsReceived(): Promise<string[]> {
  for (const family of ["v4", "v6"] as const) {
    const marker = `marker-${family}`;
    const arrived = new Promise<void>((resolve) => {
      const check = () => {
        if (!received.includes(marker)) return;
        udp[family].off("message", check);
        resolve();
      };
      udp[family].on("message", check);
    });
    const sender = dgram.createSocket(family === "v4" ? "udp4" : "udp6");
    sender.send(marker, udpPort(family), family === "v4" ? "127.0.0.1" : "::1");
    await arrived;
    sender.close();
  }
  return received.splice(0).filter((m) => !m.startsWith("marker-"));
}

/** What the UDP probe component did with each way of naming the listeners. */
async function probeUdp(server: TestServer): Promise<Record<string, string>> {
  const source = await deploy(server, { component_code: fixture("udp-probe.mjs") });
  const url = `${source.configured_props.http.endpoint_url}?v4=${udpPort("v4")}&v6=${udpPort("v6")}`;
  const res = await hit(url, { method: "POST" });
  assert.equal(res.status, 200, res.text);
  return res.body;
}

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

/** Has a plain Node process under `uid` send a datagram to the loopback listener of `family`. */
function sendAs(uid: number, family: "v4" | "v6"): Promise<void> {
  return new Promise((resolve, reject) => {
    const address = family === "v4" ? "127.0.0.1" : "::1";
    const script = `const s = require("dgram").createSocket("udp${family[1]}");
      s.send("from ${uid} over ${family}", ${udpPort(family)}, "${address}", () => s.close());`;
    const proc = spawn(process.execPath, ["-e", script], { uid, gid: uid, stdio: "inherit" });
    proc.on("error", reject);
    proc.on("close", () => resolve());
  });
}

test("by default component code cannot connect to a loopback service, and is told why", async () => {
  const server = await startServer();
  try {
    const { outcome, message } = await probe(server, `host=127.0.0.1&port=${port}`);
    assert.equal(outcome, "EGRESS_REFUSED");
    assert.match(message, /refused to connect to 127\.0\.0\.1: .*FOUNT_EXECUTOR_ALLOW_PRIVATE/);
    // A name that resolves to loopback is refused on its address, and so are the other ways to write it.
    for (const host of ["localhost", "127.1", "0x7f000001", "0", "::ffff:127.0.0.1"]) {
      const refused = await probe(server, `host=${encodeURIComponent(host)}&port=${port}`);
      assert.equal(refused.outcome, "EGRESS_REFUSED", host);
    }
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
      // UDP too, over IPv4 and IPv6: the executor's datagrams never arrive, nobody's do.
      await sendAs(uid, "v4");
      await sendAs(uid, "v6");
      await sendAs(65534, "v4");
      await sendAs(65534, "v6");
      assert.deepEqual((await datagramsReceived()).sort(), ["from 65534 over v4", "from 65534 over v6"]);
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

test("without the kernel layer no UDP datagram from component code reaches loopback, however it is addressed", async () => {
  // Under the server's own uid no firewall rule applies: only the executor's check stands.
  const server = await startServer({ executorIsolateUsers: false });
  try {
    const outcomes = await probeUdp(server);
    assert.deepEqual(await datagramsReceived(), []);
    for (const [form, outcome] of Object.entries(outcomes)) {
      // Hostile code that gets past the lookup meets the handle's own check, which answers like the kernel.
      const expected = form === "shadowed handle lookup" ? "EACCES" : "EGRESS_REFUSED";
      assert.equal(outcome, expected, `${form}: ${JSON.stringify(outcomes)}`);
    }
  } finally {
    await server.close();
  }
});

test("FOUNT_EXECUTOR_ALLOW_PRIVATE and FOUNT_EXECUTOR_ALLOW_HOSTS let UDP datagrams through", async () => {
  const open = await startServer({ executorIsolateUsers: false }, { FOUNT_EXECUTOR_ALLOW_PRIVATE: "true" });
  try {
    const outcomes = await probeUdp(open);
    const sent = Object.keys(outcomes).filter((form) => outcomes[form] === "sent");
    assert.deepEqual(sent, Object.keys(outcomes), JSON.stringify(outcomes));
    assert.deepEqual((await datagramsReceived()).sort(), sent.sort());
  } finally {
    await open.close();
  }
  const listed = await startServer(
    { executorIsolateUsers: false },
    { FOUNT_EXECUTOR_ALLOW_HOSTS: "127.0.0.1,::1" },
  );
  try {
    const outcomes = await probeUdp(listed);
    const arrived = await datagramsReceived();
    for (const form of [
      "127.0.0.1",
      "127.1",
      "localhost",
      "no address",
      "connect, then send",
      "::1",
      "dns resolver",
    ]) {
      assert.equal(outcomes[form], "sent", `${form}: ${JSON.stringify(outcomes)}`);
      assert.ok(arrived.includes(form), `${form} did not arrive: ${JSON.stringify(arrived)}`);
    }
    // The unspecified address is not among the listed ones.
    assert.equal(outcomes["0.0.0.0"], "EGRESS_REFUSED");
    assert.ok(!arrived.includes("0.0.0.0"));
  } finally {
    await listed.close();
  }
});

test("component code that drives a socket handle itself is still refused, and cannot adopt the executor's descriptors", async () => {
  // 127.0.0.2 is allowed so that an allowed connect hands over the request object a raw connect needs.
  const server = await startServer(
    { executorIsolateUsers: false },
    { FOUNT_EXECUTOR_ALLOW_HOSTS: "127.0.0.2/32" },
  );
  const twin = net.createServer((socket) => socket.end());
  await new Promise<void>((resolve) => twin.listen(port, "127.0.0.2", resolve));
  let connections = 0;
  const count = () => connections++;
  target.on("connection", count);
  try {
    const source = await deploy(server, { component_code: fixture("hostile/raw-sockets.mjs") });
    const res = await hit(`${source.configured_props.http.endpoint_url}?port=${port}`, { method: "POST" });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.request, "TCPConnectWrap", "the probe got hold of a connect request");
    assert.match(res.body.raw, /^refused /);
    assert.equal(connections, 0);
    assert.deepEqual(res.body.adopted, []);
  } finally {
    target.off("connection", count);
    await new Promise<void>((resolve) => twin.close(() => resolve()));
    await server.close();
  }
});

test("a name FOUNT_EXECUTOR_ALLOW_HOSTS allows is resolved by the system, never by a lookup the component gives", async () => {
  // The executor's own check alone (no per-uid firewall), as without root or nftables.
  const server = await startServer(
    { executorIsolateUsers: false },
    { FOUNT_EXECUTOR_ALLOW_HOSTS: "inside.example" },
  );
  try {
    // The component's lookup answers loopback for the allowed name: taken at its word, that address was
    // approved for the executor from then on, every port, plain connects included.
    const named = await probe(server, `host=inside.example&port=${port}&lookup=127.0.0.1`);
    assert.notEqual(named.outcome, "connected", named.message);
    const udpOutcomes = await probeUdp(server);
    assert.notEqual(udpOutcomes["name resolving to loopback"], "sent");
    assert.ok(!(await datagramsReceived()).includes("name resolving to loopback"));
    const plain = await probe(server, `host=127.0.0.1&port=${port}`);
    assert.equal(plain.outcome, "EGRESS_REFUSED", plain.message);
  } finally {
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
