/** `fount sessions list|revoke`: a user's console sessions, and with --user (admin key) another user's. */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { adminKey, startServer, type TestServer } from "../helpers.ts";
import { fount, fountJson } from "./run.ts";

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(() => server.close());

async function signIn(key: string): Promise<string> {
  const res = await server.api("POST", "/console/session", {
    key: null,
    body: { api_key: key },
    headers: { "x-fount-console": "1", "user-agent": "cli-test-browser" },
  });
  assert.equal(res.status, 200, res.text);
  return (res.headers.get("set-cookie") ?? "").split(";")[0]!;
}

test("a user lists and revokes their console sessions; an admin does so for any user with --user", async () => {
  const user = await server.createUser("cli-sessions");
  const env = { FOUNT_URL: server.url, FOUNT_API_KEY: user.key };
  const admin = { FOUNT_URL: server.url, FOUNT_API_KEY: adminKey };
  const first = await signIn(user.key);
  await signIn(user.key);

  const listed = await fountJson(env, "sessions", "list");
  assert.equal(listed.length, 2);
  const table = await fount(["sessions", "list"], env);
  assert.equal(table.code, 0, table.stderr);
  assert.match(table.stdout, /│ ID\s+│ SIGNED IN\s+│ EXPIRES\s+│ ADDRESS\s+│ USER AGENT\s+│/);
  assert.match(table.stdout, new RegExp(`│ ${listed[0].id} │ .* │ 127\\.0\\.0\\.1 │ cli-test-browser │`));

  const revoked = await fount(["sessions", "revoke", listed[0].id], env);
  assert.equal(revoked.code, 0, revoked.stderr);
  assert.equal(revoked.stdout.trim(), `Revoked console session ${listed[0].id}.`);
  assert.deepEqual(
    (await fountJson(env, "sessions", "list")).map((s: any) => s.id),
    [listed[1].id],
  );

  // Another user's sessions need an admin key.
  const refused = await fount(["sessions", "list", "--user", user.id], env);
  assert.notEqual(refused.code, 0);
  assert.match(refused.stderr, /Only admin keys may use the admin API/);
  assert.equal((await fountJson(admin, "sessions", "list", "--user", user.id)).length, 1);
  const ended = await fount(["sessions", "revoke", listed[1].id, "--user", user.id], admin);
  assert.equal(ended.code, 0, ended.stderr);
  assert.equal(
    (await server.api("GET", "/v1/users/me", { key: null, headers: { cookie: first } })).status,
    401,
  );
  assert.deepEqual(await fountJson(admin, "sessions", "list", "--user", user.id), []);
});
