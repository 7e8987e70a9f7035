import assert from "node:assert/strict";
import { mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { adminKey, startServer, type TestServer } from "../helpers.ts";
import { fount, tempHome } from "./run.ts";

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(() => server.close());

/** Environment of a user with a fresh home and config file, logged in nowhere yet. */
function freshUser(): Record<string, string> {
  const { home, configPath } = tempHome();
  return { HOME: home, FOUNT_CONFIG: configPath };
}

/** Environment that reaches the test server as `key` through FOUNT_URL/FOUNT_API_KEY, without a config file. */
function envFor(key: string): Record<string, string> {
  return { ...freshUser(), FOUNT_URL: server.url, FOUNT_API_KEY: key };
}

test("login checks the key, writes a 0600 config file, and whoami then works from it", async () => {
  const env = freshUser();
  const res = await fount(["login", "--url", server.url, "--api-key", adminKey], env);
  assert.equal(res.code, 0, res.stderr);
  assert.match(res.stdout, /Logged in to http:\/\/127\.0\.0\.1:\d+ as admin \(u_\w+\)/);
  const mode = statSync(env.FOUNT_CONFIG!).mode & 0o777;
  assert.equal(mode, 0o600);
  const text = readFileSync(env.FOUNT_CONFIG!, "utf8");
  assert.match(text, new RegExp(`^url = ${server.url}$`, "m"));
  assert.match(text, new RegExp(`^api_key = ${adminKey}$`, "m"));

  const who = await fount(["whoami"], env);
  assert.equal(who.code, 0, who.stderr);
  assert.match(who.stdout, /^User:\s+admin \(u_\w+\)$/m);
  assert.match(who.stdout, /^Profile:\s+default$/m);

  const json = await fount(["whoami", "--json"], env);
  assert.equal(JSON.parse(json.stdout).username, "admin");
});

test("login with a wrong key fails with the server's message and writes nothing", async () => {
  const env = freshUser();
  const res = await fount(["login", "--url", server.url, "--api-key", "fnt_wrong"], env);
  assert.equal(res.code, 1);
  assert.equal(res.stderr, "fount: Unknown or revoked API key (unauthorized)\n");
  assert.throws(() => statSync(env.FOUNT_CONFIG!), { code: "ENOENT" });
});

test("login without --api-key off a terminal is a usage error", async () => {
  const res = await fount(["login", "--url", server.url], freshUser());
  assert.equal(res.code, 2);
  assert.match(res.stderr, /Pass --api-key/);
});

test("profiles: login -p adds a section beside the default, -p selects it, logout removes its key", async () => {
  const env = freshUser();
  const other = await server.createUser("pat");
  mkdirSync(path.dirname(env.FOUNT_CONFIG!), { recursive: true });
  writeFileSync(env.FOUNT_CONFIG!, "# my settings\nurl = http://127.0.0.1:9\n", { mode: 0o600 });
  assert.equal((await fount(["login", "--url", server.url, "--api-key", adminKey], env)).code, 0);
  const res = await fount(["login", "-p", "work", "--url", server.url, "--api-key", other.key], env);
  assert.equal(res.code, 0, res.stderr);
  const text = readFileSync(env.FOUNT_CONFIG!, "utf8");
  assert.match(text, /^# my settings$/m, "comments survive");
  assert.match(text, /^\[work\]$/m);

  assert.match((await fount(["whoami", "-p", "work"], env)).stdout, /pat/);
  assert.match((await fount(["whoami"], env)).stdout, /admin/);
  // An explicit profile beats the environment; flags beat both.
  assert.match((await fount(["whoami", "-p", "work"], { ...env, FOUNT_API_KEY: adminKey })).stdout, /pat/);
  assert.match((await fount(["whoami", "-p", "work", "--api-key", adminKey], env)).stdout, /admin/);

  const out = await fount(["logout", "-p", "work"], env);
  assert.equal(out.code, 0, out.stderr);
  const after = await fount(["whoami", "-p", "work"], env);
  assert.equal(after.code, 1);
  assert.match(after.stderr, /No API key/);
  assert.match((await fount(["whoami"], env)).stdout, /admin/, "the default profile is untouched");

  const missing = await fount(["whoami", "-p", "nope"], env);
  assert.equal(missing.code, 1);
  assert.match(missing.stderr, /No profile "nope"/);
});

test("webhook create shows the secret once; list webhooks shows it; webhook delete removes it", async () => {
  const user = await server.createUser("wendy");
  const env = envFor(user.key);
  const created = await fount(["webhook", "create", "https://example.com/hook", "--name", "example"], env);
  assert.equal(created.code, 0, created.stderr);
  const id = /^Webhook:\s+(wh_\w+)$/m.exec(created.stdout)?.[1];
  assert.ok(id, created.stdout);
  assert.match(created.stdout, /^\s+whsec_\S+$/m);

  const table = await fount(["list", "webhooks"], env);
  assert.equal(table.code, 0, table.stderr);
  assert.match(table.stdout, /│ ID\s+│ NAME\s+│ URL\s+│ ACTIVE │ CREATED\s+│/);
  assert.match(table.stdout, new RegExp(`│ ${id} │ example │ https://example.com/hook │ yes`));
  assert.ok(!table.stdout.includes("whsec_"));

  const json = JSON.parse((await fount(["list", "webhooks", "--json"], env)).stdout);
  assert.deepEqual(
    json.map((w: { id: string }) => w.id),
    [id],
  );

  const createdJson = JSON.parse(
    (await fount(["--json", "webhook", "create", "https://example.com/b"], env)).stdout,
  );
  assert.match(createdJson.signing_secret, /^whsec_/);

  const deleted = await fount(["webhook", "delete", id!, "--yes"], env);
  assert.equal(deleted.code, 0, deleted.stderr);
  assert.equal(deleted.stdout, `Deleted webhook ${id} (https://example.com/hook).\n`);
  const ids = JSON.parse((await fount(["list", "wh", "--json"], env)).stdout).map(
    (w: { id: string }) => w.id,
  );
  assert.deepEqual(ids, [createdJson.id]);

  const again = await fount(["webhook", "delete", id!, "--yes"], env);
  assert.equal(again.code, 1);
  assert.equal(again.stderr, `fount: Webhook ${id} not found (not_found)\n`);

  const badUrl = await fount(["webhook", "create", "ftp://example.com"], env);
  assert.equal(badUrl.code, 1);
  assert.match(badUrl.stderr, /\(invalid_parameter\)\n$/);
});

test("list webhooks follows pagination past one page", async () => {
  const user = await server.createUser("many");
  for (let i = 0; i < 12; i++) {
    const res = await server.api("POST", "/v1/webhooks", {
      key: user.key,
      body: { url: `https://example.com/${i}` },
    });
    assert.equal(res.status, 200);
  }
  const list = JSON.parse((await fount(["list", "webhooks", "--json"], envFor(user.key))).stdout);
  assert.equal(list.length, 12);
});

test("--org acts for an organization: webhooks created for it are listed only with it", async () => {
  const user = await server.createUser("orla");
  const org = await server.api("POST", "/v1/admin/orgs", { body: { orgname: "orla-co", owner_id: user.id } });
  assert.equal(org.status, 200);
  const env = envFor(user.key);
  const wh = JSON.parse(
    (await fount(["webhook", "create", "https://example.com/o", "--org", org.body.data.id, "--json"], env))
      .stdout,
  );
  const withOrg = JSON.parse(
    (await fount(["list", "webhooks", "--json"], { ...env, FOUNT_ORG_ID: org.body.data.id })).stdout,
  );
  assert.deepEqual(
    withOrg.map((w: { id: string }) => w.id),
    [wh.id],
  );
  assert.deepEqual(JSON.parse((await fount(["list", "webhooks", "--json"], env)).stdout), []);

  const login = await fount(
    ["login", "--url", server.url, "--api-key", user.key, "--org", "o_notmine"],
    freshUser(),
  );
  assert.equal(login.code, 1);
  assert.match(login.stderr, /not a member of organization o_notmine/);
});

test("subscribe and unsubscribe, with list subscriptions in between", async () => {
  const user = await server.createUser("sam");
  const env = envFor(user.key);
  const wh = JSON.parse((await fount(["webhook", "create", "https://example.com/s", "--json"], env)).stdout);

  const sub = await fount(["subscribe", "dc_*", wh.id], env);
  assert.equal(sub.code, 0, sub.stderr);
  assert.match(sub.stdout, new RegExp(`Subscribed ${wh.id} to the default channel of dc_\\* \\(sub_\\w+\\)`));
  const errSub = JSON.parse(
    (await fount(["subscribe", "dc_*", wh.id, "--event-name", "$errors", "--json"], env)).stdout,
  );
  assert.equal(errSub.event_name, "$errors");

  const table = await fount(["list", "subscriptions"], env);
  assert.match(table.stdout, new RegExp(`│ dc_\\* +│ ${wh.id} │ default`));
  assert.match(table.stdout, new RegExp(`│ dc_\\* +│ ${wh.id} │ \\$errors`));

  const removed = JSON.parse((await fount(["unsubscribe", "dc_*", wh.id, "--json"], env)).stdout);
  assert.deepEqual(
    removed.map((s: { event_name: string }) => s.event_name),
    [""],
  );
  const left = JSON.parse((await fount(["list", "subs", "--json"], env)).stdout);
  assert.deepEqual(
    left.map((s: { event_name: string }) => s.event_name),
    ["$errors"],
  );

  const again = await fount(["unsubscribe", "dc_*", wh.id], env);
  assert.equal(again.code, 1);
  assert.match(again.stderr, /^fount: Subscription not found \(not_found\)\n$/);
  const foreign = await fount(["subscribe", "dc_*", "wh_someoneelse"], env);
  assert.equal(foreign.code, 1);
  assert.match(foreign.stderr, /\(not_found\)\n$/);
});

test("usage errors exit 2; failures without a key or server exit 1", async () => {
  const env = freshUser();
  const unknown = await fount(["frobnicate"], env);
  assert.equal(unknown.code, 2);
  assert.match(unknown.stderr, /Unknown command "frobnicate"/);
  assert.match(unknown.stderr, /fount help/);

  const option = await fount(["list", "webhooks", "--bogus"], env);
  assert.equal(option.code, 2);
  assert.match(option.stderr, /Unknown option '--bogus'/);

  const args = await fount(["subscribe", "dc_*"], env);
  assert.equal(args.code, 2);
  assert.match(args.stderr, /Missing arguments/);

  const group = await fount(["list"], env);
  assert.equal(group.code, 2);
  assert.match(group.stderr, /list webhooks/);

  const noKey = await fount(["list", "webhooks"], env);
  assert.equal(noKey.code, 1);
  assert.match(noKey.stderr, /No API key: run `fount login`/);

  const noServer = await fount(["whoami", "--url", "http://127.0.0.1:9", "--api-key", "fnt_x"], env);
  assert.equal(noServer.code, 1);
  assert.match(noServer.stderr, /^fount: Cannot reach http:\/\/127\.0\.0\.1:9: .*\(network_error\)\n$/);
});

test("help and version exit 0", async () => {
  const top = await fount(["--help"]);
  assert.equal(top.code, 0);
  assert.match(top.stdout, /admin create-user/);
  const cmd = await fount(["help", "webhook", "create"]);
  assert.match(cmd.stdout, /^Usage: fount webhook create <url>/);
  const version = await fount(["--version"]);
  assert.match(version.stdout, /^fount \d+\.\d+\.\d+/);
});
