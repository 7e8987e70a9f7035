/**
 * The event search in the CLI, as a process against a real server: `fount events --search/--where/
 * --since`, `fount events export` (NDJSON to stdout and to a file, every match, round-tripping to the
 * API's entries), `fount replay --search` (counted, confirmed with --yes), and bad options.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { createWebhook, deliveries, scriptedReceivers } from "../delivery/receiver.ts";
import { startServer, type TestServer } from "../helpers.ts";
import { fount, fountJson } from "./run.ts";

let server: TestServer;
let env: Record<string, string>;
let key: string;
let dir: string;
let source: { id: string; endpoint: string };
const scripted = scriptedReceivers();

before(async () => {
  server = await startServer({ webhookAllowPrivate: true });
  const user = await server.createUser("cli-event-search");
  key = user.key;
  env = { FOUNT_URL: server.url, FOUNT_API_KEY: user.key };
  dir = mkdtempSync(path.join(os.tmpdir(), "fount-cli-search-"));
  const res = await server.api("POST", "/v1/sources", {
    key,
    body: {
      name: "searched",
      component_code: `export default { name: "Searched", version: "0.0.1", props: { http: "$.interface.http" }, async run(e) { this.$emit(e.body); } };`,
    },
  });
  assert.equal(res.status, 200, res.text);
  source = { id: res.body.data.id, endpoint: res.body.data.endpoint_url };
  for (const body of [
    { user: { id: 42 }, text: "Refund for Lisbon" },
    { user: { id: 7 }, text: "Order shipped" },
    { user: { id: 42 }, text: "Order ✓ delivered" },
  ]) {
    const r = await fetch(source.endpoint, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    assert.equal(r.status, 200);
    await r.arrayBuffer();
  }
});

after(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

const texts = (entries: any[]) => entries.map((e) => e.event.text);

test("fount events --search and --where show the matching events, oldest first", async () => {
  assert.deepEqual(texts(await fountJson(env, "events", "searched", "--search", "order")), [
    "Order shipped",
    "Order ✓ delivered",
  ]);
  assert.deepEqual(
    texts(await fountJson(env, "events", "searched", "--search", "order", "--where", "user.id:42")),
    ["Order ✓ delivered"],
  );
  assert.deepEqual(
    texts(
      await fountJson(
        env,
        "events",
        "searched",
        "--where",
        "user.id:42",
        "--where",
        "text:Refund for Lisbon",
      ),
    ),
    ["Refund for Lisbon"],
  );
  assert.deepEqual(texts(await fountJson(env, "events", "searched", "--since", "2999-01-01")), []);
  const human = await fount(["events", "searched", "--search", "lisbon"], env);
  assert.equal(human.code, 0, human.stderr);
  assert.match(human.stdout, /Refund for Lisbon/);
  assert.doesNotMatch(human.stdout, /Order/);
});

test("fount events export writes every match as NDJSON, to stdout or a file, equal to the API's entries", async () => {
  const api = (await server.api("GET", `/v1/sources/${source.id}/event_summaries?expand=event`, { key })).body
    .data;
  const out = await fount(["events", "export", "searched"], env);
  assert.equal(out.code, 0, out.stderr);
  assert.deepEqual(
    out.stdout
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l)),
    api,
  );
  assert.equal(out.stderr, "", "no progress line when stderr is not a terminal");
  const file = path.join(dir, "orders.ndjson");
  const res = await fount(["events", "export", "searched", "--search", "order", "-o", file], env);
  assert.equal(res.code, 0, res.stderr);
  assert.deepEqual(
    texts(
      readFileSync(file, "utf8")
        .trimEnd()
        .split("\n")
        .map((l) => JSON.parse(l)),
    ),
    ["Order ✓ delivered", "Order shipped"],
  );
  const bad = await fount(["events", "export", "searched", "--where", "nocolon"], env);
  assert.notEqual(bad.code, 0);
  assert.match(bad.stderr, /where must be <json path>:<value>/);
});

test("fount events export shows a progress line when stderr is a terminal", async () => {
  // script(1) gives the command a terminal; its output is what that terminal showed.
  const root = path.join(import.meta.dirname, "../..");
  const file = path.join(dir, "progress.ndjson");
  const command = [
    process.execPath,
    path.join(root, "bin/fount.mjs"),
    "events",
    "export",
    "searched",
    "-o",
    file,
  ]
    .map((a) => `'${a}'`)
    .join(" ");
  const shown = await new Promise<string>((resolve, reject) =>
    execFile(
      "script",
      ["-qec", command, "/dev/null"],
      { env: { PATH: process.env.PATH, HOME: os.tmpdir(), ...env }, timeout: 60_000 },
      (err, stdout) => (err ? reject(err) : resolve(stdout)),
    ),
  );
  assert.match(
    shown,
    new RegExp(`Exported 3 events to ${file.replaceAll(/[.*+?^${}()|[\]\\]/g, "\\$&")}\\.`),
  );
  assert.equal(readFileSync(file, "utf8").trimEnd().split("\n").length, 3);
});

test("fount replay --search counts the matching events and sends them, marked as a replay", async () => {
  const r = await scripted(() => 200);
  const hook = await createWebhook(server, r.url, key);
  const res = await fount(
    ["replay", "searched", "--to", hook.id, "--search", "order", "--where", "user.id:42", "--yes"],
    env,
  );
  assert.equal(res.code, 0, res.stderr);
  assert.match(res.stdout, /Replaying 1 of 1 event to/);
  await server.built.services.dispatcher.drain();
  const [d] = await deliveries(server, hook.id, key);
  assert.ok(d.replay?.id);
  assert.equal(r.requests[0]!.json.text, "Order ✓ delivered");
  const refused = await fount(["replay", "searched", "--to", hook.id, "--search", "ab", "--yes"], env);
  assert.notEqual(refused.code, 0);
  assert.match(refused.stderr, /a word of at least 3 characters/);
  const followed = await fount(["events", "searched", "-f", "--search", "order"], env);
  assert.equal(followed.code, 2);
  assert.match(followed.stderr, /without a search/);
});
