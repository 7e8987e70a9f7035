import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import pg from "pg";
import { startServer, type TestServer } from "../helpers.ts";
import { freshSchema, schemaUrl, testPgUrl } from "../pg-schemas.ts";
import { fount } from "./run.ts";

let server: TestServer;
let env: Record<string, string>;
before(async () => {
  server = await startServer();
  env = { FOUNT_DATA_DIR: server.dataDir };
});
after(() => server.close());

/** `fount admin … --json` that must succeed; returns the parsed output. */
async function admin(...args: string[]): Promise<any> {
  const res = await fount(["admin", ...args, "--json"], env);
  assert.equal(res.code, 0, res.stderr);
  return JSON.parse(res.stdout);
}

test("admin create-user writes to the server's store and the printed key works over HTTP", async () => {
  const res = await fount(["admin", "create-user", "--username", "ada", "--email", "ada@example.com"], env);
  assert.equal(res.code, 0, res.stderr);
  assert.match(res.stdout, /Created user ada \(u_\w+\), plan free\./);
  const key = /^\s+(fnt_\w+)$/m.exec(res.stdout)?.[1];
  assert.ok(key, res.stdout);
  const me = await server.api("GET", "/v1/users/me", { key });
  assert.equal(me.status, 200);
  assert.equal(me.body.data.username, "ada");
  assert.ok("daily_invocations_quota" in me.body.data, "a free plan by default");
});

test("admin create-user --json gives the user, its key and key id; --admin and --plan are kept", async () => {
  const data = await admin(
    "create-user",
    "--username",
    "root2",
    "--email",
    "r@example.com",
    "--plan",
    "paid",
    "--admin",
  );
  assert.match(data.id, /^u_/);
  assert.equal(data.plan, "paid");
  assert.equal(data.is_admin, true);
  assert.match(data.api_key_id, /^key_/);
  const created = await server.api("POST", "/v1/admin/users", {
    key: data.api_key,
    body: { username: "made-by-root2", email: "m@example.com" },
  });
  assert.equal(created.status, 200, "an admin key may use the admin API");
});

test("admin create-org and add-member show up in GET /v1/users/me; remove-member takes it away", async () => {
  const owner = await admin("create-user", "--username", "olive", "--email", "olive@example.com");
  const member = await admin("create-user", "--username", "grace", "--email", "grace@example.com");
  const org = await admin("create-org", "--orgname", "acme", "--owner", "olive", "--name", "Acme Inc.");
  assert.match(org.id, /^o_/);
  assert.equal(org.owner_id, owner.id);
  assert.equal(org.email, "olive@example.com");

  // Names and IDs are both accepted.
  assert.deepEqual(await admin("add-member", "acme", member.id), {
    org_id: org.id,
    user_id: member.id,
    role: "member",
  });
  const me = await server.api("GET", "/v1/users/me", { key: member.api_key });
  assert.deepEqual(
    me.body.data.orgs.map((o: { id: string; orgname: string; name: string }) => [o.id, o.orgname, o.name]),
    [[org.id, "acme", "Acme Inc."]],
  );

  await admin("remove-member", org.id, "grace");
  const after = await server.api("GET", "/v1/users/me", { key: member.api_key });
  assert.deepEqual(after.body.data.orgs, []);

  const ownerOut = await fount(["admin", "remove-member", "acme", "olive"], env);
  assert.equal(ownerOut.code, 1);
  assert.match(
    ownerOut.stderr,
    /^fount: The owner of an organization cannot be removed from it \(conflict\)$/m,
  );
});

test("admin create-key makes a working key and revoke-key turns it to 401", async () => {
  const user = await admin("create-user", "--username", "kim", "--email", "kim@example.com");
  const key = await admin("create-key", "kim", "--name", "ci");
  assert.match(key.id, /^key_/);
  assert.equal(key.name, "ci");
  assert.equal(key.user_id, user.id);
  assert.equal((await server.api("GET", "/v1/users/me", { key: key.api_key })).status, 200);

  const revoked = await fount(["admin", "revoke-key", key.id], env);
  assert.equal(revoked.code, 0, revoked.stderr);
  assert.match(revoked.stdout, new RegExp(`Revoked API key ${key.id}`));
  assert.equal((await server.api("GET", "/v1/users/me", { key: key.api_key })).status, 401);
  assert.equal(
    (await server.api("GET", "/v1/users/me", { key: user.api_key })).status,
    200,
    "other keys stay",
  );

  const shown = await admin("show-user", user.id);
  const byId = Object.fromEntries(shown.api_keys.map((k: { id: string }) => [k.id, k]));
  assert.equal(typeof byId[key.id].revoked_at, "number");
  assert.equal(byId[user.api_key_id].revoked_at, null);
  assert.ok(!JSON.stringify(shown).includes(user.api_key), "no secrets");
});

test("admin errors print `fount: <message> (<code>)` and exit 1", async () => {
  await admin("create-user", "--username", "dup", "--email", "dup@example.com");
  const dup = await fount(["admin", "create-user", "--username", "dup", "--email", "dup@example.com"], env);
  assert.equal(dup.code, 1);
  assert.equal(dup.stderr, "fount: A user named dup exists already (conflict)\n");
  assert.equal(dup.stdout, "");

  const badName = await fount(
    ["admin", "create-user", "--username", "bad/name", "--email", "x@example.com"],
    env,
  );
  assert.equal(badName.code, 1);
  assert.match(badName.stderr, /\(invalid_parameter\)\n$/);

  const unknownKey = await fount(["admin", "revoke-key", "key_doesnotexist"], env);
  assert.equal(unknownKey.code, 1);
  assert.equal(unknownKey.stderr, "fount: API key key_doesnotexist not found (not_found)\n");

  const unknownUser = await fount(["admin", "create-key", "nobody"], env);
  assert.equal(unknownUser.code, 1);
  assert.equal(unknownUser.stderr, "fount: User nobody not found (not_found)\n");
});

test("admin usage errors exit 2 with a hint", async () => {
  const missing = await fount(["admin", "create-user", "--username", "x"], env);
  assert.equal(missing.code, 2);
  assert.match(missing.stderr, /Missing --email <email>/);
  assert.match(missing.stderr, /fount admin create-user --help/);

  const plan = await fount(
    ["admin", "create-user", "--username", "x", "--email", "x@example.com", "--plan", "gold"],
    env,
  );
  assert.equal(plan.code, 2);
  assert.match(plan.stderr, /--plan must be one of free, paid/);

  const args = await fount(["admin", "add-member", "acme"], env);
  assert.equal(args.code, 2);
  const sub = await fount(["admin", "frobnicate"], env);
  assert.equal(sub.code, 2);
  assert.match(sub.stderr, /Unknown command "admin frobnicate"/);
});

test("admin refuses a data directory without a store instead of creating one", async () => {
  const empty = mkdtempSync(path.join(os.tmpdir(), "fount-empty-"));
  try {
    const res = await fount(["admin", "create-user", "--username", "x", "--email", "x@example.com"], {
      FOUNT_DATA_DIR: empty,
    });
    assert.equal(res.code, 1);
    assert.match(res.stderr, /No Fount store at .*fount\.db/);
    assert.equal(existsSync(path.join(empty, "fount.db")), false);
  } finally {
    rmSync(empty, { recursive: true, force: true });
  }
});

test("admin refuses a PostgreSQL schema without a store instead of creating one", async () => {
  const schema = freshSchema("fount_nostore");
  for (const args of [["create-user", "--username", "x", "--email", "x@example.com"], ["nodes"]]) {
    const res = await fount(["admin", ...args], { DATABASE_URL: schemaUrl(schema) });
    assert.equal(res.code, 1);
    assert.match(res.stderr, /no Fount store at .*: check DATABASE_URL .*\(no_store\)/);
  }
  const client = new pg.Client({ connectionString: testPgUrl });
  await client.connect();
  try {
    const found = await client.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [schema]);
    assert.equal(found.rowCount, 0, "the schema was not created");
  } finally {
    await client.end();
  }
});

test("admin nodes on the SQLite store says it runs one node, with exit code 1", async () => {
  for (const args of [[], ["--json"]]) {
    const res = await fount(["admin", "nodes", ...args], env);
    assert.equal(res.code, 1);
    assert.equal(res.stdout, "");
    assert.match(res.stderr, /The SQLite store runs one node: several nodes share a PostgreSQL store/);
  }
});
