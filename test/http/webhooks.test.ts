import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startServer, type TestServer } from "../helpers.ts";
import { assertApiError, unique } from "./openapi-walk.ts";

let server: TestServer;
let key: string;
let userId: string;
before(async () => {
  server = await startServer();
  ({ key, id: userId } = await server.createUser("hooks"));
});
after(() => server.close());

async function create(body: Record<string, unknown>, as = key) {
  return server.api("POST", "/v1/webhooks", { key: as, body });
}

test("creating a webhook returns it with its signing secret, and null name and description", async () => {
  const before = Math.floor(Date.now() / 1000);
  const res = await create({ url: "https://hooks.example.com/in" });
  assert.equal(res.status, 200);
  const w = res.body.data;
  assert.match(w.id, /^wh_[A-Za-z0-9]+$/);
  assert.equal(w.user_id, userId);
  assert.equal(w.url, "https://hooks.example.com/in", "the URL as given");
  assert.equal(w.name, null);
  assert.equal(w.description, null);
  assert.equal(w.active, true);
  assert.ok(Number.isInteger(w.created_at) && w.created_at >= before && w.created_at <= before + 5);
  assert.equal(w.updated_at, w.created_at);
  // Standard Webhooks secret: whsec_ and base64 of 24 random bytes.
  assert.match(w.signing_secret, /^whsec_[A-Za-z0-9+/]{32}$/);
  assert.deepEqual(Object.keys(w).sort(), [
    "active",
    "allow_private",
    "created_at",
    "description",
    "id",
    "name",
    "signing_secret",
    "updated_at",
    "url",
    "user_id",
  ]);
});

test("name and description are kept when given", async () => {
  const w = (
    await create({ url: "http://example.com:8080/a/b?c=d", name: "Orders", description: "to the ERP" })
  ).body.data;
  assert.equal(w.name, "Orders");
  assert.equal(w.description, "to the ERP");
  assert.equal(w.url, "http://example.com:8080/a/b?c=d");
});

test("the parameters may come from the query string", async () => {
  const res = await server.api(
    "POST",
    `/v1/webhooks?url=${encodeURIComponent("https://q.example.com/")}&name=q`,
    { key },
  );
  assert.equal(res.status, 200);
  assert.equal(res.body.data.name, "q");
});

test("the URL needs http or https and a hostname; a port and a path are optional", async () => {
  for (const url of [
    "http://example.com",
    "https://example.com/",
    "https://example.com:8443",
    "https://sub.example.com:1/deep/path/?q=1#frag",
    "http://localhost:3000/hook",
    "http://127.0.0.1/x",
    "http://[::1]:9000/",
    "HTTPS://EXAMPLE.COM/Path",
  ]) {
    const res = await create({ url });
    assert.equal(res.status, 200, `${url}: ${res.text}`);
    assert.equal(res.body.data.url, url);
  }
  for (const url of [
    "example.com",
    "example.com/path",
    "localhost:8080",
    "//example.com/x",
    "ftp://example.com/",
    "ws://example.com/",
    "file:///etc/passwd",
    "javascript:alert(1)",
    "mailto:a@example.com",
    "http:example.com",
    "http:/example.com",
    "http://",
    "https://:443/",
    "http:// example.com",
    " https://example.com",
    "https://exa mple.com/",
    "http:\\\\example.com\\",
    "https://example.com:99999/",
    "",
  ]) {
    const res = await create({ url });
    assertApiError(res, { status: 400, code: "invalid_parameter" }, JSON.stringify(url));
    assert.equal(res.body.details.field, "url");
  }
  assertApiError(await create({}), { status: 400, code: "invalid_parameter" });
});

test("the signing secret is shown only on creation", async () => {
  const created = (await create({ url: "https://example.com/s" })).body.data;
  const got = await server.api("GET", `/v1/webhooks/${created.id}`, { key });
  assert.ok(!("signing_secret" in got.body.data));
  const list = await server.api("GET", "/v1/users/me/webhooks?limit=100", { key });
  assert.ok(list.body.data.every((w: any) => !("signing_secret" in w)));
  const put = await server.api("PUT", `/v1/webhooks/${created.id}`, { key, body: { name: "x" } });
  assert.ok(!("signing_secret" in put.body.data));
  const secrets = new Set<string>();
  for (let i = 0; i < 3; i++)
    secrets.add((await create({ url: "https://example.com/" })).body.data.signing_secret);
  assert.equal(secrets.size, 3, "each webhook has its own secret");
});

test("GET /users/me/webhooks is paginated, newest first, without user_id", async () => {
  const own = await server.createUser(unique("lister"));
  const ids = [];
  for (let i = 0; i < 3; i++)
    ids.push((await create({ url: `https://example.com/${i}` }, own.key)).body.data.id);
  const res = await server.api("GET", "/v1/users/me/webhooks", { key: own.key });
  assert.equal(res.status, 200);
  assert.deepEqual(
    res.body.data.map((w: any) => w.id),
    ids.reverse(),
  );
  assert.deepEqual(Object.keys(res.body.page_info).sort(), [
    "count",
    "end_cursor",
    "start_cursor",
    "total_count",
  ]);
  assert.equal(res.body.page_info.count, 3);
  for (const w of res.body.data) {
    assert.ok(!("user_id" in w));
    assert.deepEqual(Object.keys(w).sort(), [
      "active",
      "allow_private",
      "created_at",
      "description",
      "id",
      "name",
      "updated_at",
      "url",
    ]);
  }
  const empty = await server.createUser(unique("empty"));
  const none = await server.api("GET", "/v1/users/me/webhooks", { key: empty.key });
  assert.deepEqual(none.body, {
    page_info: { total_count: 0, count: 0, start_cursor: null, end_cursor: null },
    data: [],
  });
});

test("GET /webhooks/{id} returns the webhook with its user_id", async () => {
  const created = (await create({ url: "https://example.com/g", name: "g" })).body.data;
  const res = await server.api("GET", `/v1/webhooks/${created.id}`, { key });
  const { signing_secret: _secret, ...expected } = created;
  assert.deepEqual(res.body.data, expected);
  assertApiError(await server.api("GET", "/v1/webhooks/wh_doesnotexist", { key }), {
    status: 404,
    code: "not_found",
  });
  assertApiError(await server.api("GET", "/v1/webhooks/not-a-webhook", { key }), { status: 400 });
});

test("PUT /webhooks/{id} updates name, description, url and active, and only those given", async () => {
  const created = (await create({ url: "https://example.com/p", name: "before", description: "d" })).body
    .data;
  const path = `/v1/webhooks/${created.id}`;
  const renamed = await server.api("PUT", path, { key, body: { name: "after" } });
  assert.equal(renamed.status, 200);
  assert.equal(renamed.body.data.name, "after");
  assert.equal(renamed.body.data.description, "d");
  assert.equal(renamed.body.data.url, "https://example.com/p");
  assert.ok(renamed.body.data.updated_at >= created.updated_at);

  const moved = await server.api("PUT", path, {
    key,
    body: { url: "http://other.example.com:81/x", active: false, description: null },
  });
  assert.equal(moved.body.data.url, "http://other.example.com:81/x");
  assert.equal(moved.body.data.active, false);
  assert.equal(moved.body.data.description, null);
  assert.equal(moved.body.data.name, "after");

  const cleared = await server.api("PUT", path, { key, body: { name: null, active: true } });
  assert.equal(cleared.body.data.name, null);
  assert.equal(cleared.body.data.active, true);

  const unchanged = await server.api("PUT", path, { key, body: {} });
  assert.equal(unchanged.status, 200);
  assert.equal(unchanged.body.data.url, "http://other.example.com:81/x");

  for (const body of [{ url: "ftp://example.com/" }, { url: "nope" }, { active: "yes" }, { color: "red" }]) {
    assertApiError(await server.api("PUT", path, { key, body }), { status: 400 }, JSON.stringify(body));
  }
  const after = await server.api("GET", path, { key });
  assert.deepEqual(after.body.data, { ...unchanged.body.data });
  assertApiError(await server.api("PUT", "/v1/webhooks/wh_doesnotexist", { key, body: { name: "x" } }), {
    status: 404,
  });
});

test("DELETE /webhooks/{id} removes it and the subscriptions that deliver to it", async () => {
  const created = (await create({ url: "https://example.com/d" })).body.data;
  const sub = await server.api("POST", "/v1/subscriptions", {
    key,
    body: { emitter_id: "dc_*", listener_id: created.id },
  });
  assert.equal(sub.status, 200);
  const res = await server.api("DELETE", `/v1/webhooks/${created.id}`, { key });
  assert.equal(res.status, 200);
  assert.deepEqual(res.body, { data: { id: created.id } });
  assertApiError(await server.api("GET", `/v1/webhooks/${created.id}`, { key }), { status: 404 });
  assertApiError(await server.api("DELETE", `/v1/webhooks/${created.id}`, { key }), { status: 404 });
  const subs = await server.api("GET", "/v1/users/me/subscriptions", { key });
  assert.ok(subs.body.data.every((s: any) => s.listener_id !== created.id));
  const list = await server.api("GET", "/v1/users/me/webhooks?limit=100", { key });
  assert.ok(list.body.data.every((w: any) => w.id !== created.id));
});

test("another user's webhook is 404 on every webhook route", async () => {
  const created = (await create({ url: "https://example.com/mine" })).body.data;
  const other = await server.createUser(unique("other"));
  const path = `/v1/webhooks/${created.id}`;
  for (const [method, body] of [
    ["GET", undefined],
    ["PUT", { name: "stolen" }],
    ["DELETE", undefined],
  ] as const) {
    assertApiError(
      await server.api(method, path, { key: other.key, body }),
      { status: 404, code: "not_found" },
      method,
    );
  }
  assert.equal((await server.api("GET", path, { key })).body.data.name, null);
  const theirs = await server.api("GET", "/v1/users/me/webhooks", { key: other.key });
  assert.equal(theirs.body.page_info.total_count, 0);
});

test("a URL the delivery guard will refuse is saved with a warning; a public one gets none", async () => {
  for (const url of [
    "http://127.0.0.1:8080/in",
    "http://localhost:3000/",
    "http://[::1]/x",
    "http://10.1.2.3/",
  ]) {
    const res = await create({ url });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.data.url, url);
    assert.equal(res.body.warnings?.length, 1, url);
    assert.equal(res.body.warnings[0].code, "destination_refused");
    assert.match(res.body.warnings[0].message, /will be refused.*allow_private.*FOUNT_WEBHOOK_ALLOW_HOSTS/);
  }
  const fine = await create({ url: "https://hooks.example.com/in" });
  assert.equal(fine.body.warnings, undefined, "no warnings, and the answer keeps Pipedream's shape");
  // PUT warns too, when it changes the URL.
  const id = fine.body.data.id;
  const moved = await server.api("PUT", `/v1/webhooks/${id}`, { key, body: { url: "http://192.168.1.20/" } });
  assert.equal(moved.status, 200, moved.text);
  assert.equal(moved.body.warnings?.[0]?.code, "destination_refused");
  const renamed = await server.api("PUT", `/v1/webhooks/${id}`, { key, body: { name: "n" } });
  assert.equal(renamed.body.warnings, undefined, "only a change of URL is judged again");
});

test("the operator's allow-list silences the warning", async () => {
  const allowing = await startServer({ webhookAllowHosts: ["localhost"] });
  try {
    const res = await allowing.api("POST", "/v1/webhooks", { body: { url: "http://localhost:3000/" } });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.warnings, undefined);
  } finally {
    await allowing.close();
  }
});

test("only an admin may allow a webhook private addresses, and only an admin may move such a webhook", async () => {
  assertApiError(await create({ url: "http://127.0.0.1:9/", allow_private: true }), {
    status: 403,
    code: "forbidden",
  });
  const member = await server.createUser(unique("member"));
  const adminId = (await server.api("GET", "/v1/users/me")).body.data.id;
  const org = (
    await server.api("POST", "/v1/admin/orgs", { body: { orgname: unique("hookco"), owner_id: adminId } })
  ).body.data;
  await server.api("POST", `/v1/admin/orgs/${org.id}/members`, { body: { user_id: member.id } });
  const made = await server.api("POST", "/v1/webhooks", {
    body: { url: "http://127.0.0.1:9/", allow_private: true, org_id: org.id },
  });
  assert.equal(made.status, 200, made.text);
  assert.equal(made.body.data.allow_private, true);
  assert.equal(made.body.warnings, undefined, "allowed: no warning");
  const path = `/v1/webhooks/${made.body.data.id}`;
  // A member of the organization sees it, and may rename it, but not point it elsewhere.
  assert.equal((await server.api("PUT", path, { key: member.key, body: { name: "x" } })).status, 200);
  assertApiError(
    await server.api("PUT", path, { key: member.key, body: { url: "http://10.0.0.1:22/", org_id: org.id } }),
    { status: 403, code: "forbidden" },
  );
  assertApiError(await server.api("PUT", path, { key: member.key, body: { allow_private: true } }), {
    status: 403,
    code: "forbidden",
  });
  // Giving up the allowance is anyone's right; then the URL is the member's to change, with a warning.
  const moved = await server.api("PUT", path, {
    key: member.key,
    body: { url: "http://10.0.0.1:22/", allow_private: false },
  });
  assert.equal(moved.status, 200, moved.text);
  assert.equal(moved.body.data.allow_private, false);
  assert.equal(moved.body.warnings?.[0]?.code, "destination_refused");
  assert.equal((await server.api("GET", path, { key: member.key })).body.data.allow_private, false);
});

test("a member's new url clears an allowance an admin granted while the member's change was under way", async () => {
  const member = await server.createUser(unique("racer"));
  const adminId = (await server.api("GET", "/v1/users/me")).body.data.id;
  const org = (
    await server.api("POST", "/v1/admin/orgs", { body: { orgname: unique("raceco"), owner_id: adminId } })
  ).body.data;
  await server.api("POST", `/v1/admin/orgs/${org.id}/members`, { body: { user_id: member.id } });
  const made = await server.api("POST", "/v1/webhooks", {
    key: member.key,
    body: { url: "https://example.com/hook", org_id: org.id },
  });
  assert.equal(made.status, 200, made.text);
  const id = made.body.data.id as string;
  // The admin's grant commits between the member's read of the webhook (no allowance: the move is
  // the member's to make) and the member's write.
  const store = server.built.services.store;
  const update = store.updateWebhook;
  store.updateWebhook = async (...args) => {
    store.updateWebhook = update;
    assert.ok(await update.call(store, id, { allowPrivate: true, updatedAt: 1 }));
    return update.apply(store, args);
  };
  try {
    const moved = await server.api("PUT", `/v1/webhooks/${id}`, {
      key: member.key,
      body: { url: "http://10.0.0.1:22/", org_id: org.id },
    });
    assert.equal(moved.status, 200, moved.text);
    assert.equal(moved.body.data.allow_private, false);
  } finally {
    store.updateWebhook = update;
  }
  const now = (await server.api("GET", `/v1/webhooks/${id}`)).body.data;
  assert.deepEqual([now.url, now.allow_private], ["http://10.0.0.1:22/", false]);
});
