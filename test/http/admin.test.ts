import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startServer, type TestServer } from "../helpers.ts";
import { assertApiError, unique } from "./openapi-walk.ts";

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(() => server.close());

function createUser(body: Record<string, unknown>, key?: string) {
  return server.api("POST", "/v1/admin/users", { body, ...(key ? { key } : {}) });
}

test("creating a user returns it with its first API key, which works at once", async () => {
  const username = unique("ada");
  const res = await createUser({ username, email: "ada@example.com" });
  assert.equal(res.status, 200, res.text);
  const u = res.body.data;
  assert.match(u.id, /^u_[A-Za-z0-9]+$/);
  assert.equal(u.username, username);
  assert.equal(u.email, "ada@example.com");
  assert.equal(u.plan, "free", "free by default");
  assert.equal(u.is_admin, false);
  assert.match(u.api_key, /^fnt_[A-Za-z0-9]{32}$/);
  assert.match(u.api_key_id, /^key_/);
  const me = await server.api("GET", "/v1/users/me", { key: u.api_key });
  assert.equal(me.body.data.id, u.id);
  assert.ok("daily_invocations_quota" in me.body.data);
});

test("a user can be created on the paid plan, or as an admin", async () => {
  const paid = (await createUser({ username: unique("paid"), email: "p@example.com", plan: "paid" })).body
    .data;
  assert.equal(paid.plan, "paid");
  const me = await server.api("GET", "/v1/users/me", { key: paid.api_key });
  assert.ok("billing_period_start_ts" in me.body.data);

  const admin = (await createUser({ username: unique("root"), email: "r@example.com", is_admin: true })).body
    .data;
  assert.equal(admin.is_admin, true);
  const made = await createUser({ username: unique("by-admin"), email: "b@example.com" }, admin.api_key);
  assert.equal(made.status, 200);
});

test("invalid or conflicting users are refused", async () => {
  const username = unique("taken");
  assert.equal((await createUser({ username, email: "t@example.com" })).status, 200);
  assertApiError(await createUser({ username, email: "t2@example.com" }), { status: 409, code: "conflict" });
  for (const body of [
    { username: "has space", email: "a@example.com" },
    { username: "-dash", email: "a@example.com" },
    { username: "", email: "a@example.com" },
    { username: "x".repeat(65), email: "a@example.com" },
    { username: unique("ok"), email: "not-an-email" },
    { username: unique("ok"), email: "a@example.com", plan: "gold" },
    { username: unique("ok"), email: "a@example.com", is_admin: "yes" },
    { username: unique("ok") },
    { email: "a@example.com" },
  ]) {
    assertApiError(await createUser(body), { status: 400, code: "invalid_parameter" }, JSON.stringify(body));
  }
});

test("an organization gets an o_ id; name and email default to the orgname and the owner's email", async () => {
  const owner = await server.createUser(unique("founder"));
  const orgname = unique("acme");
  const res = await server.api("POST", "/v1/admin/orgs", { body: { orgname, owner_id: owner.id } });
  assert.equal(res.status, 200, res.text);
  const org = res.body.data;
  assert.match(org.id, /^o_[A-Za-z0-9]+$/);
  assert.equal(org.orgname, orgname);
  assert.equal(org.name, orgname);
  assert.match(org.email, /@example\.com$/);
  assert.equal(org.owner_id, owner.id);
  const me = (await server.api("GET", "/v1/users/me", { key: owner.key })).body.data;
  assert.deepEqual(
    me.orgs.map((o: any) => o.id),
    [org.id],
  );

  assertApiError(await server.api("POST", "/v1/admin/orgs", { body: { orgname, owner_id: owner.id } }), {
    status: 409,
    code: "conflict",
  });
  for (const body of [
    { orgname: unique("x"), owner_id: "u_doesnotexist" },
    { orgname: "bad name", owner_id: owner.id },
    { orgname: unique("x"), owner_id: "o_wrongkind" },
    { orgname: unique("x") },
    { orgname: unique("x"), owner_id: owner.id, email: "nope" },
  ]) {
    assertApiError(
      await server.api("POST", "/v1/admin/orgs", { body }),
      { status: 400 },
      JSON.stringify(body),
    );
  }
});

test("members are added and removed; the owner cannot be removed", async () => {
  const owner = await server.createUser(unique("boss"));
  const member = await server.createUser(unique("crew"));
  const org = (
    await server.api("POST", "/v1/admin/orgs", { body: { orgname: unique("crewco"), owner_id: owner.id } })
  ).body.data;
  const members = `/v1/admin/orgs/${org.id}/members`;

  const added = await server.api("POST", members, { body: { user_id: member.id } });
  assert.equal(added.status, 200, added.text);
  assert.deepEqual(added.body.data, { org_id: org.id, user_id: member.id, role: "member" });
  assert.equal(
    (await server.api("POST", members, { body: { user_id: member.id } })).status,
    200,
    "idempotent",
  );
  const seen = (await server.api("GET", "/v1/users/me", { key: member.key })).body.data.orgs;
  assert.deepEqual(
    seen.map((o: any) => o.id),
    [org.id],
  );

  const removed = await server.api("DELETE", `${members}?user_id=${member.id}`);
  assert.equal(removed.status, 200);
  assert.deepEqual(removed.body.data, { org_id: org.id, user_id: member.id });
  assert.deepEqual((await server.api("GET", "/v1/users/me", { key: member.key })).body.data.orgs, []);
  assertApiError(await server.api("DELETE", `${members}?user_id=${member.id}`), {
    status: 404,
    code: "not_found",
  });
  assertApiError(await server.api("DELETE", `${members}?user_id=${owner.id}`), {
    status: 409,
    code: "conflict",
  });

  assertApiError(
    await server.api("POST", "/v1/admin/orgs/o_doesnotexist/members", { body: { user_id: member.id } }),
    {
      status: 404,
    },
  );
  assertApiError(await server.api("POST", members, { body: { user_id: "u_doesnotexist" } }), { status: 400 });
  assertApiError(await server.api("DELETE", members), { status: 400, code: "invalid_parameter" });
});

test("a key's organizations follow its user's memberships at once, though the key check caches them", async () => {
  const owner = await server.createUser(unique("lead"));
  const member = await server.createUser(unique("hand"));
  const org = (
    await server.api("POST", "/v1/admin/orgs", { body: { orgname: unique("handco"), owner_id: owner.id } })
  ).body.data;
  const sources = `/v1/orgs/${org.id}/sources`;
  // Used (and so cached) before each change.
  assertApiError(await server.api("GET", sources, { key: member.key }), { status: 404 });
  const members = `/v1/admin/orgs/${org.id}/members`;
  assert.equal((await server.api("POST", members, { body: { user_id: member.id } })).status, 200);
  assert.equal((await server.api("GET", sources, { key: member.key })).status, 200, "a member at once");
  assert.equal((await server.api("DELETE", `${members}?user_id=${member.id}`)).status, 200);
  assertApiError(await server.api("GET", sources, { key: member.key }), { status: 404 });
});

test("API keys are created (shown once), listed without secrets and revoked", async () => {
  const user = await server.createUser(unique("keys"));
  const keys = `/v1/admin/users/${user.id}/keys`;
  const created = await server.api("POST", keys, { body: { name: "deploy" } });
  assert.equal(created.status, 200, created.text);
  const k = created.body.data;
  assert.match(k.id, /^key_/);
  assert.equal(k.user_id, user.id);
  assert.equal(k.name, "deploy");
  assert.equal(k.prefix, k.api_key.slice(0, 8));
  assert.equal((await server.api("GET", "/v1/users/me", { key: k.api_key })).body.data.id, user.id);

  const list = await server.api("GET", keys);
  assert.equal(list.status, 200);
  assert.deepEqual(list.body.data.map((x: any) => x.name).sort(), ["default", "deploy"]);
  for (const entry of list.body.data) {
    assert.deepEqual(Object.keys(entry).sort(), [
      "created_at",
      "id",
      "name",
      "prefix",
      "revoked_at",
      "user_id",
    ]);
    assert.ok(!list.text.includes(k.api_key), "no secret in the listing");
  }

  const revoked = await server.api("DELETE", `/v1/admin/keys/${k.id}`);
  assert.deepEqual(revoked.body.data, { id: k.id, revoked: true });
  assertApiError(await server.api("GET", "/v1/users/me", { key: k.api_key }), {
    status: 401,
    code: "unauthorized",
  });
  assert.equal(
    (await server.api("GET", "/v1/users/me", { key: user.key })).status,
    200,
    "the other key still works",
  );
  const after = (await server.api("GET", keys)).body.data.find((x: any) => x.id === k.id);
  assert.ok(Number.isInteger(after.revoked_at));
  assertApiError(await server.api("DELETE", `/v1/admin/keys/${k.id}`), { status: 404, code: "not_found" });
  assertApiError(await server.api("DELETE", "/v1/admin/keys/key_doesnotexist"), { status: 404 });

  assertApiError(await server.api("POST", "/v1/admin/users/u_doesnotexist/keys", { body: {} }), {
    status: 404,
  });
  assertApiError(await server.api("GET", "/v1/admin/users/u_doesnotexist/keys"), { status: 404 });
});

test("admins list every user and organization, newest first, a page at a time", async () => {
  const made = [];
  for (let i = 0; i < 3; i++)
    made.push((await createUser({ username: unique("lister"), email: "l@example.com" })).body.data);
  const first = await server.api("GET", "/v1/admin/users?limit=2");
  assert.equal(first.status, 200, first.text);
  assert.deepEqual(
    first.body.data.map((u: any) => u.id),
    [made[2].id, made[1].id],
  );
  assert.deepEqual(first.body.data[0], {
    id: made[2].id,
    username: made[2].username,
    email: "l@example.com",
    plan: "free",
    is_admin: false,
    created_at: made[2].created_at,
  });
  const total = first.body.page_info.total_count;
  assert.ok(total >= 4, "the three and the bootstrap admin");
  assert.equal(first.body.page_info.count, 2);
  const second = await server.api("GET", `/v1/admin/users?limit=2&after=${first.body.page_info.end_cursor}`);
  assert.equal(second.body.data[0].id, made[0].id);
  const back = await server.api(
    "GET",
    `/v1/admin/users?limit=2&before=${second.body.page_info.start_cursor}`,
  );
  assert.deepEqual(back.body.data, first.body.data);
  // Walking every page sees each user once, the oldest (the bootstrap admin) last.
  const seen: string[] = [];
  let cursor: string | null = null;
  do {
    const page: any = await server.api("GET", `/v1/admin/users?limit=3${cursor ? `&after=${cursor}` : ""}`);
    seen.push(...page.body.data.map((u: any) => u.username));
    cursor = page.body.page_info.end_cursor;
  } while (cursor);
  assert.equal(seen.length, total);
  assert.equal(new Set(seen).size, total);
  assert.equal(seen.at(-1), "admin");
  const narrow = await server.api("GET", "/v1/admin/users?limit=1&include=id,username");
  assert.deepEqual(Object.keys(narrow.body.data[0]).sort(), ["id", "username"]);

  const org = (
    await server.api("POST", "/v1/admin/orgs", { body: { orgname: unique("listed"), owner_id: made[0].id } })
  ).body.data;
  const orgs = await server.api("GET", "/v1/admin/orgs?limit=1");
  assert.equal(orgs.status, 200, orgs.text);
  assert.deepEqual(orgs.body.data, [org]);
  assert.ok(orgs.body.page_info.total_count >= 1);
  const allOrgs = await server.api("GET", "/v1/admin/orgs?limit=100");
  assert.equal(allOrgs.body.data.length, allOrgs.body.page_info.total_count);
  assert.equal(allOrgs.body.page_info.end_cursor, null);

  for (const path of [
    "/v1/admin/users?limit=0",
    "/v1/admin/users?limit=101",
    "/v1/admin/users?after=nonsense",
    "/v1/admin/orgs?after=czE&before=czE",
  ]) {
    assertApiError(await server.api("GET", path), { status: 400 }, path);
  }
});

test("every admin route answers 403 to a non-admin key, before looking at the input", async () => {
  const user = await server.createUser(unique("plain"));
  const victim = await server.createUser(unique("victim"));
  for (const [method, path, body] of [
    ["POST", "/v1/admin/users", { username: unique("sneaky"), email: "s@example.com", is_admin: true }],
    ["POST", "/v1/admin/users", { nonsense: true }],
    ["POST", "/v1/admin/orgs", { orgname: unique("mine"), owner_id: user.id }],
    ["POST", "/v1/admin/orgs/o_abc/members", { user_id: user.id }],
    ["DELETE", `/v1/admin/orgs/o_abc/members?user_id=${user.id}`, undefined],
    ["POST", `/v1/admin/users/${victim.id}/keys`, { name: "stolen" }],
    ["GET", `/v1/admin/users/${victim.id}/keys`, undefined],
    ["GET", "/v1/admin/users", undefined],
    ["GET", "/v1/admin/orgs?limit=nonsense", undefined],
    ["DELETE", "/v1/admin/keys/key_abc", undefined],
  ] as const) {
    const res = await server.api(method, path, { key: user.key, body });
    assertApiError(res, { status: 403, code: "forbidden" }, `${method} ${path}`);
  }
  assert.equal((await server.api("GET", "/v1/users/me", { key: victim.key })).status, 200);
  assert.equal((await server.api("GET", `/v1/admin/users/${victim.id}/keys`)).body.data.length, 1);
});

test("the admin API lists the nodes serving the store, the answering one marked; only admins may", async () => {
  const res = await server.api("GET", "/v1/admin/nodes");
  assert.equal(res.status, 200, res.text);
  const nodes = res.body.data as Array<Record<string, unknown>>;
  // One node serves this test's store, on either driver (on PostgreSQL, other files' nodes use other schemas).
  assert.equal(nodes.length, 1, res.text);
  const [self] = nodes;
  assert.equal(self!.self, true);
  assert.equal(self!.state, "live");
  const now = Date.now() / 1000;
  assert.ok(
    (self!.started_at as number) <= (self!.heartbeat_at as number) &&
      (self!.heartbeat_at as number) <= now + 5,
    res.text,
  );
  if (process.env.FOUNT_TEST_STORE === "postgres") {
    assert.match(String(self!.id), /^[^/]+\/[A-Za-z0-9]{8}$/, "FOUNT_NODE_ID and the process's suffix");
    assert.equal(typeof self!.sources, "number");
  } else {
    assert.equal(self!.url, null);
    assert.equal(self!.sources, null, "one node runs every source: no leases to count");
  }
  const user = (await createUser({ username: unique("plain"), email: "n@example.com" })).body.data;
  assertApiError(await server.api("GET", "/v1/admin/nodes", { key: user.api_key }), {
    status: 403,
    code: "forbidden",
  });
});
