/**
 * Starting and stopping Fount as a user and a supervisor do: `node src/main.ts` and `npm start` as
 * processes with their own env. One server per data dir, a uid range per server, a first admin key
 * that is never lost, signals that stop the server, and a data dir executors cannot reach refused.
 */
import assert from "node:assert/strict";
import { mkdirSync, readFileSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import { test } from "node:test";
import { fixture } from "../fixtures/components/fixtures.ts";
import { alive, gone, processCleanup, type ServerProcess, startProcess } from "./server-process.ts";

const root = process.getuid?.() === 0;
const adminKey = "fnt_processtestkey000000000000000000";
const { running, tempDir } = processCleanup("fount-process-");

function start(env: NodeJS.ProcessEnv, how: "node" | "npm" = "node"): ServerProcess {
  const p = startProcess({ PORT: "0", ...env }, how);
  running.add(p);
  return p;
}

async function api(url: string, method: string, p: string, body?: unknown): Promise<any> {
  const res = await fetch(url + p, {
    method,
    headers: { authorization: `Bearer ${adminKey}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  assert.ok(res.status < 300, `${method} ${p}: ${res.status} ${text}`);
  return JSON.parse(text);
}

/** Deploys the egress probe on a running server and returns the uid its executor runs under. */
async function executorUid(url: string): Promise<number> {
  const source = (await api(url, "POST", "/v1/sources", { component_code: fixture("egress-probe.mjs") }))
    .data;
  // Port 9 (discard) on loopback: refused or not, the probe answers with its uid.
  const res = await fetch(`${source.configured_props.http.endpoint_url}?host=127.0.0.1&port=9`, {
    method: "POST",
  });
  const text = await res.text();
  assert.equal(res.status, 200, text);
  return JSON.parse(text).uid;
}

test("a second server on the same data dir refuses to start, naming the first", async () => {
  const dataDir = tempDir();
  const first = start({ FOUNT_DATA_DIR: dataDir, FOUNT_BOOTSTRAP_API_KEY: adminKey });
  await first.url();
  const firstPid = await first.serverPid();
  const second = start({ FOUNT_DATA_DIR: dataDir, FOUNT_BOOTSTRAP_API_KEY: adminKey });
  const { code } = await second.exited;
  assert.equal(code, 2, second.output());
  assert.match(
    second.output(),
    new RegExp(`data dir .* is in use by another Fount server \\(pid ${firstPid}\\)`),
  );
  // The first one keeps serving.
  assert.equal((await api(await first.url(), "GET", "/v1/users/me")).data.username, "admin");
  first.proc.kill("SIGTERM");
  assert.equal((await first.exited).code, 0, first.output());
  // Once it stopped, the data dir is free again.
  const third = start({ FOUNT_DATA_DIR: dataDir, FOUNT_BOOTSTRAP_API_KEY: adminKey });
  await third.url();
  await third.kill();
});

test("a first start on a taken port creates no admin; the next start shows the key", async () => {
  const dataDir = tempDir();
  const blocker = net.createServer();
  await new Promise<void>((resolve) => blocker.listen(0, "127.0.0.1", resolve));
  const port = (blocker.address() as net.AddressInfo).port;
  try {
    const failed = start({ FOUNT_DATA_DIR: dataDir, PORT: String(port) });
    const { code } = await failed.exited;
    assert.notEqual(code, 0);
    assert.match(failed.output(), new RegExp(`127\\.0\\.0\\.1:${port} is already in use`));
    assert.doesNotMatch(failed.output(), /API key/);
  } finally {
    await new Promise<void>((resolve) => blocker.close(() => resolve()));
  }
  const next = start({ FOUNT_DATA_DIR: dataDir });
  const [, key] = await next.waitFor(/shown only this once:\n\s+(fnt_\w+)/);
  const url = await next.url();
  const me = await fetch(`${url}/v1/users/me`, { headers: { authorization: `Bearer ${key}` } });
  assert.equal(me.status, 200, await me.text());
  await next.kill();
});

test("a taken metrics port stops the start with the metrics listener's own message", async () => {
  const blocker = net.createServer();
  await new Promise<void>((resolve) => blocker.listen(0, "127.0.0.1", resolve));
  const port = (blocker.address() as net.AddressInfo).port;
  try {
    const failed = start({
      FOUNT_DATA_DIR: tempDir(),
      FOUNT_METRICS_PORT: String(port),
      FOUNT_METRICS_HOST: "127.0.0.1",
    });
    const { code } = await failed.exited;
    assert.notEqual(code, 0);
    assert.match(
      failed.output(),
      new RegExp(
        `^fount: cannot listen for metrics on 127\\.0\\.0\\.1:${port} \\(FOUNT_METRICS_HOST, FOUNT_METRICS_PORT\\): already in use$`,
        "m",
      ),
    );
    assert.doesNotMatch(failed.output(), /cannot listen on/);
  } finally {
    await new Promise<void>((resolve) => blocker.close(() => resolve()));
  }
});

test("a taken endpoint port stops the start naming FOUNT_ENDPOINT_PORT; a start prints where endpoints answer", async () => {
  const dataDir = tempDir();
  const blocker = net.createServer();
  await new Promise<void>((resolve) => blocker.listen(0, "127.0.0.1", resolve));
  const port = (blocker.address() as net.AddressInfo).port;
  try {
    const failed = start({ FOUNT_DATA_DIR: dataDir, FOUNT_ENDPOINT_PORT: String(port) });
    const { code } = await failed.exited;
    assert.notEqual(code, 0);
    assert.match(
      failed.output(),
      new RegExp(
        `127\\.0\\.0\\.1:${port} is already in use; stop what listens there or set FOUNT_ENDPOINT_PORT`,
      ),
    );
    assert.doesNotMatch(failed.output(), /API key/);
  } finally {
    await new Promise<void>((resolve) => blocker.close(() => resolve()));
  }
  const next = start({ FOUNT_DATA_DIR: dataDir, FOUNT_BOOTSTRAP_API_KEY: adminKey });
  const [, endpoints] = await next.waitFor(
    /^Source endpoints answer on (http:\/\/127\.0\.0\.1:\d+)\/e\/\{id\}$/m,
  );
  const url = await next.url();
  assert.notEqual(endpoints, url);
  const source = (await api(url, "POST", "/v1/sources", { component_code: fixture("http-echo.mjs") })).data;
  assert.ok(source.endpoint_url.startsWith(`${endpoints}/e/`), source.endpoint_url);
  assert.equal((await fetch(source.endpoint_url, { method: "POST" })).status, 200);
  await next.kill();
});

test("SIGTERM to `npm start` stops the server itself", async () => {
  const npm = start({ FOUNT_DATA_DIR: tempDir() }, "npm");
  await npm.url();
  const serverPid = await npm.serverPid();
  assert.notEqual(serverPid, npm.proc.pid);
  npm.proc.kill("SIGTERM");
  // The supervisor's SIGTERM reaches the server: it shuts down instead of living on, re-parented.
  await gone(serverPid, 60_000);
  await npm.exited;
  assert.match(npm.output(), /shutting down/);
});

test("a second SIGINT ends the server at once, while the first waits for an in-flight run", async () => {
  // The run tells the test it has started by connecting to it.
  let started!: () => void;
  const runStarted = new Promise<void>((resolve) => {
    started = resolve;
  });
  const signal = net.createServer((socket) => {
    socket.destroy();
    started();
  });
  await new Promise<void>((resolve) => signal.listen(0, "127.0.0.1", resolve));
  const signalPort = (signal.address() as net.AddressInfo).port;
  try {
    const server = start({
      FOUNT_DATA_DIR: tempDir(),
      FOUNT_BOOTSTRAP_API_KEY: adminKey,
      FOUNT_INVOCATION_TIMEOUT_MS: "600000",
      FOUNT_EXECUTOR_ALLOW_HOSTS: "127.0.0.1",
    });
    const url = await server.url();
    const code = `import net from "node:net";
      export default { name: "slow", version: "1", props: { http: "$.interface.http" },
      async run() { net.connect(${signalPort}, "127.0.0.1").on("error", () => {});
        await new Promise((r) => setTimeout(r, 600000)); } };`;
    const source = (await api(url, "POST", "/v1/sources", { component_code: code })).data;
    const slow = fetch(source.configured_props.http.endpoint_url, { method: "POST" }).catch(() => undefined);
    await runStarted;
    server.proc.kill("SIGINT");
    await server.waitFor(/shutting down/);
    // Past the echo of one Ctrl-C that npm forwards.
    await new Promise((r) => setTimeout(r, 1000));
    assert.equal(alive(server.proc.pid!), true, "the first SIGINT waits for the in-flight run");
    server.proc.kill("SIGINT");
    const { code: exit } = await server.exited;
    assert.equal(exit, 130, server.output());
    await slow;
  } finally {
    await new Promise<void>((resolve) => signal.close(() => resolve()));
  }
});

test("two servers on one host run executors under distinct uid ranges", {
  skip: !root && "needs root",
}, async () => {
  const a = start({ FOUNT_DATA_DIR: tempDir(), FOUNT_BOOTSTRAP_API_KEY: adminKey });
  const b = start({ FOUNT_DATA_DIR: tempDir(), FOUNT_BOOTSTRAP_API_KEY: adminKey });
  const [uidA, uidB] = await Promise.all([executorUid(await a.url()), executorUid(await b.url())]);
  assert.notEqual(uidA, uidB);
  const rangeOf = (uid: number) => Math.floor(uid / 100_000);
  assert.notEqual(rangeOf(uidA), rangeOf(uidB), `uids ${uidA} and ${uidB} come from one range`);

  // A third server asking for A's range by FOUNT_EXECUTOR_UID_BASE is refused.
  const clash = start({
    FOUNT_DATA_DIR: tempDir(),
    FOUNT_EXECUTOR_UID_BASE: String(rangeOf(uidA) * 100_000 + 50_000),
  });
  assert.equal((await clash.exited).code, 2, clash.output());
  assert.match(
    clash.output(),
    /FOUNT_EXECUTOR_UID_BASE=\d+: uids \d+–\d+ belong to another Fount server \(pid \d+/,
  );
  await Promise.all([a.kill(), b.kill()]);

  // A free base is used as given.
  const base = 700_000_000 + (process.pid % 1000) * 100_000;
  const c = start({
    FOUNT_DATA_DIR: tempDir(),
    FOUNT_BOOTSTRAP_API_KEY: adminKey,
    FOUNT_EXECUTOR_UID_BASE: String(base),
  });
  const uidC = await executorUid(await c.url());
  assert.ok(uidC >= base && uidC < base + 100_000, `uid ${uidC} from base ${base}`);
  await c.kill();
});

test("a data dir under a folder other uids cannot traverse stops the start, naming the folder and the fix", {
  skip: !root && "needs root",
}, async () => {
  const closed = tempDir(); // mkdtemp: mode 0700
  const dataDir = path.join(closed, "data");
  mkdirSync(dataDir);
  const refused = start({ FOUNT_DATA_DIR: dataDir, FOUNT_BOOTSTRAP_API_KEY: adminKey });
  assert.equal((await refused.exited).code, 2, refused.output());
  const line = refused
    .output()
    .split("\n")
    .find((l) => l.startsWith("fount: "));
  assert.ok(line, refused.output());
  assert.ok(line.includes(`${closed} is not searchable by other users`), line);
  assert.match(line, /FOUNT_EXECUTOR_ISOLATE_USERS=false/);

  // Turning isolation off explicitly makes it work: a source deploys and runs.
  const open = start({
    FOUNT_DATA_DIR: dataDir,
    FOUNT_BOOTSTRAP_API_KEY: adminKey,
    FOUNT_EXECUTOR_ISOLATE_USERS: "false",
  });
  const url = await open.url();
  assert.equal((await fetch(`${url}/readyz`)).status, 200);
  assert.equal(await executorUid(url), 0);
  assert.match(readFileSync(path.join(dataDir, "server.lock.json"), "utf8"), /"pid"/);
  await open.kill();
});

test("a FOUNT_TRUST_PROXY that is not a list of proxy addresses stops the start with one line", async () => {
  const refused = start({ FOUNT_DATA_DIR: tempDir(), FOUNT_TRUST_PROXY: "true" });
  assert.equal((await refused.exited).code, 2, refused.output());
  assert.match(
    refused.output(),
    /^fount: FOUNT_TRUST_PROXY must list the reverse proxies' addresses .*"true"/m,
  );
});

test("a FOUNT_NODE_URL that is not http://host:port or off stops the start with one line", async () => {
  for (const value of ["ftp://10.0.0.5:8787", "http://10.0.0.5:8787/fount", "10.0.0.5:8787"]) {
    const refused = start({ FOUNT_DATA_DIR: tempDir(), FOUNT_NODE_URL: value });
    assert.equal((await refused.exited).code, 2, refused.output());
    assert.match(refused.output(), /^fount: FOUNT_NODE_URL must be http:\/\/host:port/m, value);
  }
});

test("the start says in one plain line which egress layers hold, and without nft why only the guard does", async () => {
  const withNft = start({ FOUNT_DATA_DIR: tempDir(), FOUNT_BOOTSTRAP_API_KEY: adminKey });
  await withNft.url();
  const expected = !root
    ? /^egress: executor guard only \(executors share the server's uid: not root.*\): component code cannot reach loopback, private or link-local addresses over TCP or UDP/m
    : /^egress: (kernel firewall \(nftables table inet fount_\d+_\d+, uids \d+–\d+\) and executor guard|executor guard only \(nft (not found|failed: .*)\)): component code cannot reach loopback, private or link-local addresses over TCP or UDP, nor Unix sockets/m;
  assert.match(withNft.output(), expected);
  assert.match(withNft.output(), /^scratch: /m);
  withNft.proc.kill("SIGTERM");
  assert.equal((await withNft.exited).code, 0, withNft.output());

  // nft lives in /usr/sbin: without it on PATH, a missing nft is one line, not a logged error with a stack.
  const path = (process.env.PATH ?? "")
    .split(":")
    .filter((dir) => !dir.endsWith("/sbin"))
    .join(":");
  const withoutNft = start({ FOUNT_DATA_DIR: tempDir(), FOUNT_BOOTSTRAP_API_KEY: adminKey, PATH: path });
  await withoutNft.url();
  const output = withoutNft.output();
  if (root) {
    assert.match(
      output,
      /^egress: executor guard only \(nft not found\): component code cannot reach .* over TCP or UDP, nor Unix sockets; install nftables for the kernel layer$/m,
    );
  }
  assert.doesNotMatch(output, /ENOENT|"stack"/);
  assert.equal(output.match(/^egress: /gm)?.length, 1, output);
  withoutNft.proc.kill("SIGTERM");
  assert.equal((await withoutNft.exited).code, 0, output);
});

test("an executor memory setting that is not a whole number ≥ 0 stops the start with one line naming it", async () => {
  for (const [name, value] of [
    ["FOUNT_EXECUTOR_MALLOC_ARENA_MAX", "two"],
    ["FOUNT_EXECUTOR_REALM_YOUNG_MB", "-1"],
  ] as const) {
    const failed = start({ FOUNT_DATA_DIR: tempDir(), [name]: value });
    const { code } = await failed.exited;
    assert.equal(code, 2, failed.output());
    assert.match(failed.output(), new RegExp(`^fount: ${name} must be an integer ≥ 0, got "${value}"$`, "m"));
  }
});
