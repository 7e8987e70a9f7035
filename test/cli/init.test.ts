/**
 * `fount init` writes starter components that deploy as they are: each template is written, deployed
 * with the CLI and seen working against a real server.
 */
import assert from "node:assert/strict";
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { startServer, type TestServer } from "../helpers.ts";
import { fount } from "./run.ts";

let server: TestServer;
let env: Record<string, string>;
let dir: string;
let items: Array<{ id: number; title: string }>;
let api: http.Server;
let apiUrl: string;

before(async () => {
  // The polling template reads a list from a local server, which components may reach only when allowed.
  server = await startServer({ executorAllowPrivate: true });
  const user = await server.createUser("cli-init");
  env = { FOUNT_URL: server.url, FOUNT_API_KEY: user.key };
  dir = mkdtempSync(path.join(os.tmpdir(), "fount-cli-init-"));
  items = [
    { id: 2, title: "second" },
    { id: 1, title: "first" },
  ];
  api = http.createServer((_req, res) => {
    res.setHeader("content-type", "application/json");
    res.end(JSON.stringify(items));
  });
  await new Promise<void>((resolve) => api.listen(0, "127.0.0.1", resolve));
  apiUrl = `http://127.0.0.1:${(api.address() as AddressInfo).port}/items`;
});

after(async () => {
  await new Promise((resolve) => api.close(resolve));
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

async function ok(...args: string[]): Promise<string> {
  const res = await fount(args, env, 60_000);
  assert.equal(res.code, 0, `fount ${args.join(" ")}: ${res.stderr}`);
  return res.stdout;
}

test("init writes an HTTP source that deploys as it is, answers its endpoint and emits the request", async () => {
  const folder = path.join(dir, "New Requests");
  const out = await ok("init", folder);
  const file = path.join(folder, "new-requests.mjs");
  assert.match(out, new RegExp(`^Wrote ${file.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}: an HTTP source`, "m"));
  assert.match(readFileSync(file, "utf8"), /key: "new-requests",\n {2}name: "New Requests"/);

  const s = JSON.parse(await ok("deploy", file, "--json"));
  assert.equal(s.component_key, "new-requests");
  const res = await fetch(`${s.endpoint_url}/hello?x=1`, {
    method: "POST",
    body: '{"a":1}',
    headers: { "content-type": "application/json" },
  });
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), { received: true });
  const events = JSON.parse(await ok("events", s.id, "--json"));
  assert.equal(events.length, 1);
  assert.equal(events[0].metadata.summary, "POST /hello");
  assert.deepEqual(events[0].event.body, { a: 1 });
});

test("init --template timer writes a timer source whose runs count in this.db", async () => {
  const folder = path.join(dir, "ticker");
  await ok("init", folder, "--template", "timer");
  const s = JSON.parse(await ok("deploy", path.join(folder, "ticker.mjs"), "--json"));
  assert.equal(s.configured_props.timer.interval_seconds, 3600, "the default schedule");
  const first = JSON.parse(await ok("run", s.id, "--json"));
  const second = JSON.parse(await ok("run", s.id, "--json"));
  assert.deepEqual([first.emits[0].metadata.summary, second.emits[0].metadata.summary], ["Run #1", "Run #2"]);
});

test("init -t polling writes a polling source: new items once each, through its cursor and dedupe", async () => {
  const folder = path.join(dir, "poller");
  await ok("init", folder, "-t", "polling");
  const file = path.join(folder, "poller.mjs");
  assert.match(readFileSync(file, "utf8"), /dedupe: "unique"/);
  const s = JSON.parse(await ok("deploy", file, "--prop", `url=${apiUrl}`, "--json"));
  const first = JSON.parse(await ok("run", s.id, "--json"));
  assert.deepEqual(
    first.emits.map((e: any) => e.metadata.summary),
    ["first", "second"],
    "oldest first",
  );
  const again = JSON.parse(await ok("run", s.id, "--json"));
  assert.deepEqual(again.emits, [], "nothing new, nothing emitted");
  items.unshift({ id: 3, title: "third" });
  const third = JSON.parse(await ok("run", s.id, "--json"));
  assert.deepEqual(
    third.emits.map((e: any) => e.event),
    [{ id: 3, title: "third" }],
  );
});

test("init refuses to overwrite a file unless --force, and an unknown template", async () => {
  const folder = path.join(dir, "kept");
  await ok("init", folder);
  const file = path.join(folder, "kept.mjs");
  writeFileSync(file, "// mine\n");
  const refused = await fount(["init", folder, "--template", "timer"], env);
  assert.equal(refused.code, 1);
  assert.match(refused.stderr, /kept\.mjs exists; --force overwrites it/);
  assert.equal(readFileSync(file, "utf8"), "// mine\n");
  await ok("init", folder, "--template", "timer", "--force");
  assert.match(readFileSync(file, "utf8"), /\$\.interface\.timer/);

  const unknown = await fount(["init", folder, "--template", "cron"], env);
  assert.equal(unknown.code, 2);
  assert.match(unknown.stderr, /--template must be one of http, timer, polling, not "cron"/);
});

test("init writes no file through a symbolic link, dangling or not, even with --force", async () => {
  const folder = path.join(dir, "linked");
  mkdirSync(folder);
  const file = path.join(folder, "linked.mjs");
  // A link to a place outside the folder, where nothing is yet.
  const outside = path.join(dir, "outside.mjs");
  symlinkSync(outside, file);
  const dangling = await fount(["init", folder], env);
  assert.equal(dangling.code, 1, dangling.stderr);
  assert.equal(dangling.stderr, `fount: ${file} is a symbolic link; not writing through it\n`);
  assert.equal(existsSync(outside), false, "nothing was written through the link");

  writeFileSync(outside, "keep me\n");
  const forced = await fount(["init", folder, "--force"], env);
  assert.equal(forced.code, 1, forced.stderr);
  assert.equal(readFileSync(outside, "utf8"), "keep me\n", "--force leaves the link's target alone");
  assert.ok(lstatSync(file).isSymbolicLink());

  // A plain file is replaced with --force.
  rmSync(file);
  writeFileSync(file, "old\n");
  assert.equal((await fount(["init", folder, "--force"], env)).code, 0);
  assert.match(readFileSync(file, "utf8"), /key: "linked"/);
});
