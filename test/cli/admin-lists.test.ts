/** `fount list users` and `fount list orgs` list through the admin API with an admin key, newest first. */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { adminKey, startServer, type TestServer } from "../helpers.ts";
import { fount } from "./run.ts";

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(() => server.close());

test("list users and list orgs show every user and organization, newest first, owners by name", async () => {
  const env = { FOUNT_URL: server.url, FOUNT_API_KEY: adminKey };
  const ada = await server.createUser("ada-lister");
  const bob = await server.createUser("bob-lister");
  const org = await server.api("POST", "/v1/admin/orgs", { body: { orgname: "listco", owner_id: ada.id } });
  assert.equal(org.status, 200, org.text);

  const json = await fount(["list", "users", "--json"], env);
  assert.equal(json.code, 0, json.stderr);
  const users = JSON.parse(json.stdout);
  assert.deepEqual(
    users.map((u: { username: string }) => u.username),
    ["bob-lister", "ada-lister", "admin"],
  );
  assert.deepEqual(Object.keys(users[0]).sort(), [
    "created_at",
    "email",
    "id",
    "is_admin",
    "plan",
    "username",
  ]);
  assert.equal(users[0].id, bob.id);

  const text = await fount(["list", "users"], env);
  assert.equal(text.code, 0, text.stderr);
  // Cells are separated by spaces and the table's rules (│).
  assert.match(text.stdout, /ID[\s│]+USERNAME[\s│]+EMAIL[\s│]+PLAN[\s│]+ADMIN[\s│]+CREATED/);
  assert.match(
    text.stdout,
    new RegExp(`${ada.id}[\\s│]+ada-lister[\\s│]+ada-lister@example\\.com[\\s│]+free[\\s│]+no[\\s│]`),
  );

  const orgs = await fount(["list", "orgs"], env);
  assert.equal(orgs.code, 0, orgs.stderr);
  assert.match(
    orgs.stdout,
    new RegExp(`${org.body.data.id}[\\s│]+listco[\\s│]+listco[\\s│]+ada-lister[\\s│]`),
  );
  const orgsJson = await fount(["list", "organizations", "--json"], env);
  assert.deepEqual(JSON.parse(orgsJson.stdout), [org.body.data]);

  // A key that is not an admin's gets the API's refusal.
  const refused = await fount(["list", "users"], { FOUNT_URL: server.url, FOUNT_API_KEY: ada.key });
  assert.equal(refused.code, 1);
  assert.match(refused.stderr, /\(forbidden\)/);
});
