/**
 * The CLI as a person meets it: `delete` asks on a terminal and takes `--yes` (and refuses without it
 * elsewhere), sources and webhooks are found by a unique start of their name or ID (several fits are an
 * error listing them), and `deploy` without an argument offers a picker on a terminal and says what to
 * do elsewhere.
 */
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { startServer, type TestServer } from "../helpers.ts";
import { fount, hasScript, onTerminal } from "./run.ts";

let server: TestServer;
let env: Record<string, string>;
let key: string;

before(async () => {
  server = await startServer({}, {}, { publishRegistry: true });
  key = (await server.createUser("forgiving")).key;
  env = { FOUNT_URL: server.url, FOUNT_API_KEY: key, FOUNT_CONFIG: path.join(os.tmpdir(), "fount-none") };
});
after(() => server.close());

const code = (name: string) =>
  `export default { name: ${JSON.stringify(name)}, version: "0.0.1", async run() { this.$emit({ ok: true }); } };`;

async function deploy(name: string): Promise<{ id: string; name_slug: string }> {
  const res = await server.api("POST", "/v1/sources", { key, body: { component_code: code(name), name } });
  assert.equal(res.status, 200, res.text);
  return res.body.data;
}

const exists = async (id: string) => (await server.api("GET", `/v1/sources/${id}`, { key })).status === 200;

test("delete without a terminal refuses without --yes, and deletes with it", async () => {
  const s = await deploy("refuse-me");
  const refused = await fount(["delete", "refuse-me"], env);
  assert.equal(refused.code, 2, refused.stderr);
  assert.equal(
    refused.stderr,
    `fount: Not deleting source refuse-me (${s.id}): pass --yes to delete without a terminal to confirm on\n`,
  );
  assert.equal(await exists(s.id), true);
  const done = await fount(["delete", "refuse-me", "--yes"], env);
  assert.equal(done.code, 0, done.stderr);
  assert.equal(done.stdout, `Deleted source refuse-me (${s.id}).\n`);
  assert.equal(await exists(s.id), false);
});

test("delete on a terminal asks, naming the source, and deletes only on yes", {
  skip: !hasScript,
}, async () => {
  const s = await deploy("ask-me");
  const no = await onTerminal(["delete", "ask-me"], env, [[/\[y\/N\] /, "n\r"]]);
  assert.equal(no.code, 1, no.screen);
  assert.match(no.screen, new RegExp(`Delete source ask-me \\(${s.id}\\) and all its events\\? \\[y/N\\]`));
  assert.match(no.screen, /Nothing deleted\./);
  assert.equal(await exists(s.id), true);
  const yes = await onTerminal(["delete", "ask"], env, [[/\[y\/N\] /, "y\r"]]);
  assert.equal(yes.code, 0, yes.screen);
  assert.match(yes.screen, new RegExp(`Deleted source ask-me \\(${s.id}\\)\\.`));
  assert.equal(await exists(s.id), false);
});

test("a unique start of a name or an ID names the source; several fits are an error listing them", async () => {
  const alpha = await deploy("prefix-alpha");
  const beta = await deploy("prefix-beta");
  const byName = await fount(["describe", "prefix-al"], env);
  assert.equal(byName.code, 0, byName.stderr);
  assert.match(byName.stdout, new RegExp(`^ID:\\s+${alpha.id}$`, "m"));
  const byId = await fount(["describe", beta.id.slice(0, beta.id.length - 3), "--json"], env);
  assert.equal(byId.code, 0, byId.stderr);
  assert.equal(JSON.parse(byId.stdout).id, beta.id);
  const both = await fount(["run", "prefix-"], env);
  assert.equal(both.code, 1);
  assert.match(
    both.stderr,
    /^fount: "prefix-" could be any of 2 sources; give more of the name, or the ID:$/m,
  );
  assert.match(both.stderr, new RegExp(`^ {2}prefix-beta \\(${beta.id}\\)$`, "m"));
  assert.match(both.stderr, new RegExp(`^ {2}prefix-alpha \\(${alpha.id}\\)$`, "m"));
  const none = await fount(["describe", "prefix-gamma"], env);
  assert.equal(none.code, 1);
  assert.match(none.stderr, /\(not_found\)$/m);
  // Webhooks too: by a start of the ID or the name.
  const hook = (
    await server.api("POST", "/v1/webhooks", {
      key,
      body: { url: "https://hooks.example.com/a", name: "orders" },
    })
  ).body.data;
  const listed = await fount(["deliveries", "ord"], env);
  assert.equal(listed.code, 0, listed.stderr);
  assert.match(listed.stdout, new RegExp(`No deliveries to ${hook.id}`));
  const gone = await fount(["webhook", "delete", hook.id.slice(0, 6), "--yes"], env);
  assert.equal(gone.code, 0, gone.stderr);
  assert.match(gone.stdout, new RegExp(`Deleted webhook ${hook.id}`));
});

test("deploy without an argument and without a terminal says what to give", async () => {
  const res = await fount(["deploy"], env);
  assert.equal(res.code, 2);
  assert.match(
    res.stderr,
    /^fount: Missing <file\|url\|key>: name what to deploy .*the picker needs a terminal$/m,
  );
  assert.match(res.stderr, /Run `fount deploy --help` for usage\./);
});

test("deploy without an argument on a terminal offers the registry and local files", {
  skip: !hasScript,
}, async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "fount-pick-"));
  writeFileSync(path.join(dir, "mine.mjs"), code("Mine"));
  writeFileSync(path.join(dir, "notes.mjs"), "export const x = 1;\n");
  const picked = await onTerminal(
    ["deploy", "--name", "picked"],
    env,
    [
      [/Enter to choose/, "new-req"],
      [/❯ http-new-requests/, "\r"],
    ],
    dir,
  );
  assert.equal(picked.code, 0, picked.screen);
  assert.match(picked.screen, /\.\/mine\.mjs {2}local file/, "a component file here is offered");
  assert.doesNotMatch(picked.screen, /notes\.mjs/, "a file that is no component is not");
  assert.match(picked.screen, /Deployed picked \(dc_\w+\)/);
  const s = (await server.api("GET", "/v1/sources/picked", { key })).body.data;
  assert.equal(s.component_key, "http-new-requests");
});
