/**
 * What `npm run test:image` checks in the running image (docs/deploy.md, "Testing the image"): a first
 * start with compose.yaml's capabilities (probes, the HEALTHCHECK, the console, a deployed source
 * answering a hit and storing its event, executors under uids of their own and reniced, the key from a
 * secret file, the CLI, SIGTERM), a restart with the Kubernetes example's, and the entry point's
 * refusals. Each check prints one line.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { freePort } from "../bench/lib/processes.ts";
import {
  type Box,
  type BoxDirs,
  type BoxProcess,
  childrenOf,
  execInBox,
  logs,
  niceAndUid,
  ok,
  startInBox,
  waitFor,
} from "./test-image-box.ts";

/** Where executors' uids start when the server claims a range (src/runtime/uid-range.ts). */
const FIRST_AUTO_UID = 1_000_000;
/** How much lower the pool puts executors' CPU priority (src/runtime/executors/model.ts). */
const EXECUTOR_NICE = 10;
const keyFile = { FOUNT_ENCRYPTION_KEY_FILE: "/run/secrets/fount_encryption_key" };

/** Component code that says which uid it runs under, and writes to its scratch folder. */
const whoCode = `import fs from "node:fs";
import os from "node:os";
export default {
  name: "Who am I",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  async run() {
    fs.writeFileSync(os.tmpdir() + "/probe", "written");
    this.$emit({ uid: process.getuid(), tmp: os.tmpdir(), read: fs.readFileSync(os.tmpdir() + "/probe", "utf8") });
  },
};`;

async function api(base: string, key: string, method: string, route: string, body?: unknown) {
  const res = await fetch(`${base}${route}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined, text };
}

/** Where a server in the box answers: the API (PORT) and source endpoints (FOUNT_ENDPOINT_PORT). */
interface Ports {
  api: number;
  endpoints: number;
  /** http://127.0.0.1:<api> */
  base: string;
  /** http://127.0.0.1:<endpoints> */
  endpointBase: string;
}

/** Runs `checks` against a server started in the box; prints its output when one fails. */
async function withServer(
  box: Box,
  dirs: BoxDirs,
  caps: string[],
  checks: (server: BoxProcess, ports: Ports) => Promise<void>,
): Promise<void> {
  const api = await freePort();
  const endpoints = await freePort();
  const ports = {
    api,
    endpoints,
    base: `http://127.0.0.1:${api}`,
    endpointBase: `http://127.0.0.1:${endpoints}`,
  };
  const log = path.join(logs, "server.log");
  const env = { PORT: String(api), FOUNT_ENDPOINT_PORT: String(endpoints), ...keyFile };
  const server = startInBox(box, dirs, caps, env, box.command, log);
  try {
    await checks(server, ports);
  } catch (err) {
    process.stdout.write(`server output (${log}):\n${server.output().slice(-4000)}\n`);
    throw err;
  } finally {
    // unshare --kill-child passes the SIGKILL on to the box's PID 1.
    if (server.child.exitCode === null) server.child.kill("SIGKILL");
    await server.exited;
  }
}

/** SIGTERM to the box's PID 1, as `docker stop` sends: exit 0 once in-flight work is done. */
async function stop(server: BoxProcess): Promise<number> {
  const t = Date.now();
  process.kill(server.pid(), "SIGTERM");
  assert.equal(await server.exited, 0, "exit status after SIGTERM");
  return (Date.now() - t) / 1000;
}

/** The executor processes of the server (its children running runner.mjs), with their nice value and uid. */
function executors(server: BoxProcess): Array<{ nice: number; uid: number }> {
  return childrenOf(server.pid())
    .filter((pid) => readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("/executor/runner.mjs"))
    .map(niceAndUid);
}

/** Hits the `who` source and returns what it saw. */
async function hitWho(ports: Ports, key: string): Promise<{ uid: number; tmp: string; read: string }> {
  const source = await api(ports.base, key, "GET", "/v1/sources/who");
  assert.equal(source.status, 200, source.text);
  const path = new URL(source.body.data.endpoint_url).pathname;
  const hit = await fetch(`${ports.endpointBase}${path}`, { method: "POST" });
  assert.equal(hit.status, 200, await hit.text());
  const events = await api(ports.base, key, "GET", "/v1/sources/who/event_summaries");
  return events.body.data[0].event;
}

/** The first start, with compose.yaml's capabilities; returns the admin's API key. */
export async function checkFirstStart(box: Box, dirs: BoxDirs, caps: string[]): Promise<string> {
  let key = "";
  await withServer(box, dirs, caps, async (server, ports) => {
    const { base } = ports;
    const t = Date.now();
    key = await waitFor(
      "the server's first start",
      () => /Its API key, shown only this once:\n\s+(fnt_\w+)/.exec(server.output())?.[1],
      180_000,
      server.exited,
    );
    const pid = server.pid();
    assert.match(readFileSync(`/proc/${pid}/status`, "utf8"), /^NoNewPrivs:\s+1$/m);
    ok(
      `the entry point started the server as PID 1 (root, capabilities ${caps.join(",")}, no_new_privs, read-only /) in ${((Date.now() - t) / 1000).toFixed(1)} s; it printed the admin's API key`,
    );
    // The start-up report is plain lines (startNotes, src/app/executors.ts): what confines component code here.
    assert.match(server.output(), /^scratch: no tmpfs here, so each owner's folder is measured/m);
    assert.match(server.output(), /^egress: executor guard only \(nft failed/m);
    ok(
      "without SYS_ADMIN and NET_ADMIN it says so: scratch folders measured, egress checked in the executors",
    );

    const health = await fetch(`${base}/healthz`);
    assert.equal(health.status, 200);
    assert.deepEqual(await health.json(), { status: "ok" });
    await execInBox(box, pid, { PORT: String(ports.api) }, box.healthcheck);
    ok("GET /healthz 200 {status: ok}, and the image's HEALTHCHECK command exits 0");
    const ready = await fetch(`${base}/readyz`);
    assert.equal(ready.status, 200);
    assert.deepEqual(await ready.json(), { status: "ready" });
    ok("GET /readyz 200 {status: ready}");

    const page = await (await fetch(`${base}/`)).text();
    const script = /<script type="module" src="([^"]+)"/.exec(page)?.[1];
    assert.ok(script, "the console page names its script");
    assert.equal((await fetch(`${base}${script}`)).status, 200);
    ok(`the web console is served, its script built into the image (${script})`);

    const made = await api(base, key, "POST", "/v1/sources", {
      key: "http-new-requests",
      name: "image-test",
    });
    assert.equal(made.status, 200, made.text);
    const endpoint = new URL(made.body.data.endpoint_url);
    assert.equal(
      endpoint.origin,
      `http://localhost:${ports.endpoints}`,
      "endpoint URLs: PUBLIC_URL's default host on the endpoint port",
    );
    const onApi = await fetch(`${base}${endpoint.pathname}`, { method: "POST" });
    assert.equal(onApi.status, 421, "the API's origin serves no endpoint");
    const marker = randomBytes(6).toString("hex");
    const hit = await fetch(`${ports.endpointBase}${endpoint.pathname}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ hello: "image", marker }),
    });
    assert.equal(hit.status, 200, await hit.text());
    const events = await api(base, key, "GET", "/v1/sources/image-test/event_summaries");
    assert.equal(events.status, 200, events.text);
    assert.deepEqual(
      events.body.data.map((e: { event: { body: unknown } }) => e.event.body),
      [{ hello: "image", marker }],
    );
    ok(
      `a source deployed from the registry (http-new-requests) answered a hit at ${endpoint.href} (the endpoints' own port; the API's answers 421) and stored its event`,
    );

    const who = await api(base, key, "POST", "/v1/sources", { component_code: whoCode, name: "who" });
    assert.equal(who.status, 200, who.text);
    const seen = await hitWho(ports, key);
    assert.ok(seen.uid >= FIRST_AUTO_UID, `component code ran as uid ${seen.uid}`);
    assert.equal(seen.read, "written");
    const serverNice = niceAndUid(pid).nice;
    const running = executors(server);
    assert.ok(running.length > 0, "an executor runs");
    for (const e of running) {
      assert.ok(e.uid >= FIRST_AUTO_UID, `executor uid ${e.uid}`);
      assert.equal(e.nice, Math.min(19, serverNice + EXECUTOR_NICE), "executors reniced (SYS_NICE)");
    }
    ok(
      `component code ran under a uid of its own (${seen.uid}), reniced to ${running[0]!.nice}, and wrote to its scratch folder ${seen.tmp}`,
    );

    assert.ok(!existsSync(path.join(dirs.data, "secret.key")), "no secret.key: the key came from the file");
    ok("the encryption key came from FOUNT_ENCRYPTION_KEY_FILE (no secret.key in the data volume)");

    const node = await execInBox(box, pid, {}, ["node", "--version"]);
    assert.match(node, /^v24\./);
    const version = await execInBox(box, pid, {}, ["fount", "--version"]);
    ok(`in the image: node ${node}, \`${version}\``);

    ok(`SIGTERM (docker stop): exit 0 in ${(await stop(server)).toFixed(1)} s`);
  });
  return key;
}

/**
 * A restart on the same volume with the Kubernetes example's capabilities (no SYS_NICE): the source
 * deployed before still runs, its executor under a uid of its own, at the server's priority.
 */
export async function checkRestart(box: Box, dirs: BoxDirs, caps: string[], key: string): Promise<void> {
  await withServer(box, dirs, caps, async (server, ports) => {
    await waitFor(
      "the restart",
      () => (/^Fount is listening on /m.test(server.output()) ? true : undefined),
      180_000,
      server.exited,
    );
    assert.doesNotMatch(server.output(), /Created the admin user/, "the store of the first start was kept");
    const seen = await hitWho(ports, key);
    assert.ok(seen.uid >= FIRST_AUTO_UID, `component code ran as uid ${seen.uid}`);
    const serverNice = niceAndUid(server.pid()).nice;
    for (const e of executors(server)) assert.equal(e.nice, serverNice, "no SYS_NICE: not reniced");
    await stop(server);
    ok(
      `restarted on the same volume with the Kubernetes example's capabilities (${caps.join(",")}): the source deployed before answered, its executor under uid ${seen.uid} at the server's priority; SIGTERM exit 0`,
    );
  });
}

/** The entry point's refusals: an unreadable key file, and a key that cannot open the store. */
export async function checkRefusals(box: Box, dirs: BoxDirs, caps: string[]): Promise<void> {
  const log = path.join(logs, "refusals.log");
  const nowhere = { FOUNT_ENCRYPTION_KEY_FILE: "/run/secrets/nowhere" };
  const missing = startInBox(box, dirs, caps, nowhere, box.command, log);
  assert.equal(await missing.exited, 2, missing.output());
  assert.match(missing.output(), /FOUNT_ENCRYPTION_KEY_FILE=\/run\/secrets\/nowhere is not a readable file/);
  ok("the entry point refuses a FOUNT_ENCRYPTION_KEY_FILE it cannot read (exit 2, one line)");

  writeFileSync(path.join(dirs.secrets, "other_key"), randomBytes(32).toString("base64"));
  const otherKey = { FOUNT_ENCRYPTION_KEY_FILE: "/run/secrets/other_key" };
  const other = startInBox(box, dirs, caps, otherKey, box.command, log);
  assert.equal(await other.exited, 1, other.output());
  assert.match(other.output(), /cannot open the secrets already in this store/);
  ok("another key on the same volume is refused at start (exit 1): the file's key sealed the store");
}
