/**
 * Conventions every route shares: the API key, JSON bodies, parameters from query or body, include and
 * exclude, pagination and cursors, trailing slashes, request IDs, rate limiting and acting for an
 * organization.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { adminKey, startServer, type TestServer } from "../helpers.ts";
import {
  assertApiError,
  call,
  ensureAll,
  makerContext,
  operations,
  ownValues,
  toRequest,
  unique,
} from "./openapi-walk.ts";

let server: TestServer;
before(async () => {
  server = await startServer({}, {}, { publishRegistry: true });
});
after(() => server.close());

async function createWebhook(key: string, body: Record<string, unknown> = {}): Promise<any> {
  const res = await server.api("POST", "/v1/webhooks", {
    key,
    body: { url: "https://hooks.example.com/in", ...body },
  });
  assert.equal(res.status, 200, res.text);
  return res.body.data;
}

test("every route except the public probes answers 401 without a valid API key", async () => {
  const ops = await operations(server);
  const owner = makerContext(server, ops, await server.createUser(unique("auth")));
  await ensureAll(owner, ops);
  const headers: Array<Record<string, string> | undefined> = [
    undefined,
    { authorization: "Bearer" },
    { authorization: `Basic ${Buffer.from(`user:${owner.user.key}`).toString("base64")}` },
    { authorization: `${owner.user.key}` },
    { authorization: `Bearer ${owner.user.key}x` },
    { authorization: `Bearer ${"k".repeat(600)}` },
  ];
  let checked = 0;
  for (const op of ops) {
    if (op.public) continue;
    const req = toRequest(op, (await ownValues(owner, op))!);
    for (const h of headers) {
      const res = await call(server, op.method, req.path, { key: null, body: req.body, headers: h });
      assertApiError(res, { status: 401, code: "unauthorized" }, `${op.label} ${JSON.stringify(h)}`);
      checked += 1;
    }
  }
  assert.ok(checked > 0);
});

test("a revoked key is refused, and the user's other keys keep working", async () => {
  const user = await server.createUser(unique("revoke"));
  const second = await server.api("POST", `/v1/admin/users/${user.id}/keys`, { body: { name: "ci" } });
  assert.equal(second.status, 200);
  const keys = await server.api("GET", `/v1/admin/users/${user.id}/keys`);
  const first = keys.body.data.find((k: any) => k.name === "default");
  assert.equal((await server.api("DELETE", `/v1/admin/keys/${first.id}`)).status, 200);
  assertApiError(await server.api("GET", "/v1/users/me", { key: user.key }), {
    status: 401,
    code: "unauthorized",
  });
  assert.equal((await server.api("GET", "/v1/users/me", { key: second.body.data.api_key })).status, 200);
});

test("the key is accepted with any case of the Bearer scheme", async () => {
  const user = await server.createUser(unique("scheme"));
  const res = await server.api("GET", "/v1/users/me", {
    key: null,
    headers: { authorization: `bearer ${user.key}` },
  });
  assert.equal(res.status, 200);
});

test("public probes, the OpenAPI document and the docs answer without a key", async () => {
  for (const path of ["/healthz", "/readyz", "/openapi.json", "/docs"]) {
    assert.equal((await server.api("GET", path, { key: null })).status, 200, path);
  }
});

test("every POST and PUT route answers 415 to a body that is not JSON", async (t) => {
  const ops = await operations(server);
  const owner = makerContext(server, ops, await server.createUser(unique("media")));
  await ensureAll(owner, ops);
  for (const op of ops.filter((o) => o.hasBody)) {
    await t.test(op.label, async () => {
      const req = toRequest(op, (await ownValues(owner, op))!);
      const key = op.admin ? adminKey : owner.user.key;
      for (const contentType of [
        "text/plain",
        "application/x-www-form-urlencoded",
        "application/xml",
        "text/json",
      ]) {
        const res = await call(server, op.method, req.path, {
          key,
          raw: JSON.stringify(req.body),
          contentType,
        });
        assertApiError(res, { status: 415, code: "unsupported_media_type" }, `${op.label} ${contentType}`);
      }
    });
  }
});

test("a JSON body is accepted with a charset, and a body without a content type is a 415", async () => {
  const { key } = await server.createUser(unique("charset"));
  const body = JSON.stringify({ url: "https://example.com/x" });
  const ok = await server.api("POST", "/v1/webhooks", {
    key,
    raw: body,
    contentType: "application/json; charset=utf-8",
  });
  assert.equal(ok.status, 200);
  const res = await fetch(`${server.url}/v1/webhooks`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}` },
    body: new Blob([body]), // no content type at all
  });
  assert.equal(res.status, 415);
  assert.equal(((await res.json()) as { code: string }).code, "unsupported_media_type");
});

test("a body over the size limit gets 413 and creates nothing", async () => {
  const { key } = await server.createUser(unique("big"));
  const raw = JSON.stringify({ url: "https://example.com/", description: "d".repeat(1024 * 1024 + 1) });
  assertApiError(await server.api("POST", "/v1/webhooks", { key, raw }), {
    status: 413,
    code: "payload_too_large",
  });
  assert.equal((await server.api("GET", "/v1/users/me/webhooks", { key })).body.page_info.total_count, 0);
});

test("a request head over Node's 16 KB limit gets a JSON error of the catalogue", async () => {
  const res = await server.api("GET", `/v1/users/me?include=${"x".repeat(100 * 1024)}`);
  assertApiError(res, { range: "4xx" });
});

test("include and exclude keep or drop top-level fields of each item, and nothing else", async () => {
  const { key } = await server.createUser(unique("fields"));
  const created = await createWebhook(key, { name: "n" });
  const one = await server.api("GET", `/v1/webhooks/${created.id}?include=id,url`, { key });
  assert.deepEqual(one.body, { data: { id: created.id, url: created.url } });
  const dropped = await server.api("GET", `/v1/webhooks/${created.id}?exclude=url,%20name`, { key });
  assert.equal(dropped.body.data.id, created.id);
  assert.ok(!("url" in dropped.body.data) && !("name" in dropped.body.data));
  assert.ok("description" in dropped.body.data);

  const list = await server.api("GET", "/v1/users/me/webhooks?include=id", { key });
  assert.deepEqual(list.body.data, [{ id: created.id }]);
  assert.equal(list.body.page_info.total_count, 1, "page_info is not filtered");
  const none = await server.api("GET", "/v1/users/me/webhooks?include=nothing_like_this", { key });
  assert.deepEqual(none.body.data, [{}]);

  // On a POST, include comes from the body or the query like any parameter.
  const post = await server.api("POST", "/v1/webhooks?include=id,signing_secret", {
    key,
    body: { url: "https://example.com/" },
  });
  assert.deepEqual(Object.keys(post.body.data).sort(), ["id", "signing_secret"]);
  const both = await server.api("GET", `/v1/users/me?include=id,username&exclude=username`, { key });
  assert.deepEqual(Object.keys(both.body.data), ["id"]);
});

test("lists are newest first and cursors page toward older and back toward newer items", async () => {
  const { key } = await server.createUser(unique("pages"));
  const ids: string[] = [];
  for (let i = 0; i < 25; i++) ids.push((await createWebhook(key, { name: `w${i}` })).id);
  const newest = [...ids].reverse();

  const first = await server.api("GET", "/v1/users/me/webhooks", { key });
  assert.equal(first.body.data.length, 10, "default page size");
  assert.deepEqual(first.body.page_info.total_count, 25);
  assert.equal(first.body.page_info.count, 10);
  assert.deepEqual(
    first.body.data.map((w: any) => w.id),
    newest.slice(0, 10),
  );
  assert.equal(typeof first.body.page_info.start_cursor, "string");
  assert.equal(typeof first.body.page_info.end_cursor, "string");

  // Clients page until end_cursor is null, which it is on the last page (not on an empty one after it).
  const pages = [first.body];
  let cursor = first.body.page_info.end_cursor;
  while (cursor !== null) {
    const res = await server.api("GET", `/v1/users/me/webhooks?after=${cursor}`, { key });
    assert.equal(res.status, 200);
    assert.ok(res.body.data.length > 0, "a non-null end_cursor promises more");
    assert.equal(res.body.page_info.total_count, 25);
    pages.push(res.body);
    cursor = res.body.page_info.end_cursor;
  }
  assert.deepEqual(
    pages.map((p) => p.data.length),
    [10, 10, 5],
  );
  assert.deepEqual(
    pages.flatMap((p) => p.data.map((w: any) => w.id)),
    newest,
  );

  // Back toward newer items: `before` the start of page 3 is page 2, in the same newest-first order.
  const back = await server.api("GET", `/v1/users/me/webhooks?before=${pages[2].page_info.start_cursor}`, {
    key,
  });
  assert.deepEqual(back.body.data, pages[1].data);
  assert.deepEqual(back.body.page_info, pages[1].page_info);
  const top = await server.api("GET", `/v1/users/me/webhooks?before=${pages[0].page_info.start_cursor}`, {
    key,
  });
  assert.deepEqual(top.body.data, []);
  const nearTop = await server.api(
    "GET",
    `/v1/users/me/webhooks?limit=3&before=${pages[1].page_info.start_cursor}`,
    { key },
  );
  assert.deepEqual(
    nearTop.body.data.map((w: any) => w.id),
    newest.slice(7, 10),
  );

  for (const [limit, count] of [
    ["1", 1],
    ["100", 25],
    ["25", 25],
  ] as const) {
    const res = await server.api("GET", `/v1/users/me/webhooks?limit=${limit}`, { key });
    assert.equal(res.body.data.length, count, `limit=${limit}`);
  }
});

test("bad page sizes and cursors are 400s naming the parameter", async () => {
  const { key } = await server.createUser(unique("cursors"));
  await createWebhook(key);
  const list = await server.api("GET", "/v1/users/me/webhooks", { key });
  const valid = list.body.page_info.start_cursor;
  for (const limit of ["0", "101", "-1", "x", "1.5", "1e400", ""]) {
    const res = await server.api("GET", `/v1/users/me/webhooks?limit=${limit}`, { key });
    assertApiError(res, { status: 400, code: "invalid_parameter" }, `limit=${limit}`);
    assert.equal(res.body.details.field, "limit");
  }
  for (const cursor of [
    "garbage",
    "czE=",
    Buffer.from("s1x").toString("base64url"),
    "%2F%2F",
    "x".repeat(300),
  ]) {
    for (const dir of ["after", "before"]) {
      const res = await server.api("GET", `/v1/users/me/webhooks?${dir}=${cursor}`, { key });
      assertApiError(res, { status: 400 }, `${dir}=${cursor}`);
      assert.equal(res.body.details.field, dir);
    }
  }
  const both = await server.api("GET", `/v1/users/me/webhooks?after=${valid}&before=${valid}`, { key });
  assertApiError(both, { status: 400, code: "invalid_parameter" });
});

test("parameters come from the query or the JSON body, and the body wins", async () => {
  const { key } = await server.createUser(unique("merge"));
  const url = "https://example.com/q";
  const fromQuery = await server.api("POST", `/v1/webhooks?url=${encodeURIComponent(url)}&name=from-query`, {
    key,
  });
  assert.equal(fromQuery.status, 200, fromQuery.text);
  assert.equal(fromQuery.body.data.name, "from-query");
  // Pipedream's clients send a JSON content type with an empty body and the parameters in the query.
  const emptyBody = await server.api("POST", `/v1/webhooks?url=${encodeURIComponent(url)}`, { key, raw: "" });
  assert.equal(emptyBody.status, 200, emptyBody.text);
  const both = await server.api("POST", `/v1/webhooks?url=${encodeURIComponent(url)}&name=from-query`, {
    key,
    body: { name: "from-body", description: "only in body" },
  });
  assert.equal(both.status, 200);
  assert.equal(both.body.data.name, "from-body");
  assert.equal(both.body.data.url, url);
  assert.equal(both.body.data.description, "only in body");
  // A PUT takes a boolean from the query as text.
  const put = await server.api("PUT", `/v1/webhooks/${both.body.data.id}?active=false&name=q`, {
    key,
    body: { name: "b" },
  });
  assert.equal(put.body.data.active, false);
  assert.equal(put.body.data.name, "b");
});

test("trailing slashes are optional on every path", async () => {
  const { key } = await server.createUser(unique("slashes"));
  const created = await createWebhook(key);
  assert.equal((await server.api("GET", "/v1/users/me/", { key })).status, 200);
  assert.equal((await server.api("GET", "/v1/users/me/webhooks/?limit=1", { key })).status, 200);
  assert.equal((await server.api("GET", `/v1/webhooks/${created.id}/`, { key })).body.data.id, created.id);
  const post = await server.api("POST", "/v1/webhooks/", { key, body: { url: "https://example.com/" } });
  assert.equal(post.status, 200);
  assertApiError(await server.api("PATCH", "/v1/users/me/", { key }), {
    status: 405,
    code: "method_not_allowed",
  });
  assert.equal((await server.api("GET", "/healthz/", { key: null })).status, 200);
});

test("unknown paths are 404 and known paths with another method 405 with Allow", async () => {
  const { key } = await server.createUser(unique("routes"));
  assertApiError(await server.api("GET", "/v1/nothing", { key }), { status: 404, code: "not_found" });
  assertApiError(await server.api("GET", "/v1/nothing", { key: null }), { status: 404, code: "not_found" });
  const res = await server.api("PATCH", "/v1/webhooks/wh_abc", { key });
  assertApiError(res, { status: 405, code: "method_not_allowed" });
  assert.deepEqual(
    res.headers
      .get("allow")
      ?.split(",")
      .map((m) => m.trim())
      .sort(),
    ["DELETE", "GET", "HEAD", "PUT"],
  );
  assertApiError(await server.api("DELETE", "/v1/users/me", { key }), { status: 405 });
});

test("Pipedream Connect's /components/configure and /components/props are 404, not 405", async () => {
  const { key } = await server.createUser(unique("connect"));
  for (const path of ["/v1/components/configure", "/v1/components/props"]) {
    for (const method of ["POST", "PUT", "DELETE"]) {
      const res = await server.api(method, path, { key, body: method === "DELETE" ? undefined : {} });
      assertApiError(res, { status: 404, code: "not_found" });
      assert.equal(res.headers.get("allow"), null, `${method} ${path} names no other method`);
    }
  }
  // A component's path with another method is still a 405.
  assertApiError(await server.api("POST", "/v1/components/sc_abc", { key, body: {} }), {
    status: 405,
    code: "method_not_allowed",
  });
});

test("the request ID is echoed when the client sends a sane one and generated otherwise", async () => {
  const { key } = await server.createUser(unique("reqid"));
  const echoed = await server.api("GET", "/v1/users/me", {
    key,
    headers: { "x-request-id": "trace-123.abc_X" },
  });
  assert.equal(echoed.headers.get("x-request-id"), "trace-123.abc_X");
  const generated = await server.api("GET", "/v1/users/me", { key });
  assert.match(generated.headers.get("x-request-id") ?? "", /^[0-9a-f-]{36}$/);
  for (const bad of ["has space", "x".repeat(200), "semi;colon"]) {
    const res = await server.api("GET", "/v1/users/me", { key, headers: { "x-request-id": bad } });
    const id = res.headers.get("x-request-id") ?? "";
    assert.notEqual(id, bad);
    assert.match(id, /^[0-9a-f-]{36}$/);
  }
  const distinct = new Set<string>();
  for (let i = 0; i < 5; i++)
    distinct.add((await server.api("GET", "/healthz", { key: null })).headers.get("x-request-id")!);
  assert.equal(distinct.size, 5);
  // Errors carry it too, so that a client can quote it.
  for (const res of [
    await server.api("GET", "/v1/users/me", { key: null, headers: { "x-request-id": "e1" } }),
    await server.api("GET", "/v1/nothing", { key, headers: { "x-request-id": "e2" } }),
    await server.api("POST", "/v1/webhooks", { key, raw: "{", headers: { "x-request-id": "e3" } }),
  ]) {
    assert.match(res.headers.get("x-request-id") ?? "", /^e\d$/);
  }
});

test("each user gets their own rate limit, answered with 429 and Retry-After", async () => {
  const limited = await startServer({ rateLimit: 3 });
  try {
    const user = await limited.createUser(unique("limited")); // one of the admin key's three
    for (let i = 0; i < 3; i++)
      assert.equal((await limited.api("GET", "/v1/users/me", { key: user.key })).status, 200);
    const res = await limited.api("GET", "/v1/users/me", { key: user.key });
    assertApiError(res, { status: 429, code: "rate_limited" });
    const retry = Number(res.headers.get("retry-after"));
    assert.ok(Number.isInteger(retry) && retry >= 1 && retry <= 60, `Retry-After ${retry}`);
    // Another user's key has its own budget; the probes are not limited.
    assert.equal((await limited.api("GET", "/v1/users/me")).status, 200);
    for (let i = 0; i < 5; i++)
      assert.equal((await limited.api("GET", "/healthz", { key: null })).status, 200);
    // Errors count too: a flood of bad requests is limited like good ones.
    assertApiError(await limited.api("POST", "/v1/webhooks", { key: user.key, raw: "{" }), { status: 429 });
  } finally {
    await limited.close();
  }
});

test("spelling the Authorization header differently does not get a key a fresh rate limit", async () => {
  const limited = await startServer({ rateLimit: 3 });
  try {
    const user = await limited.createUser(unique("spelling"));
    const spellings = [
      `Bearer ${user.key}`,
      `bearer ${user.key}`,
      `BEARER  ${user.key}`,
      `Bearer ${user.key} `,
    ];
    const statuses = [];
    for (const authorization of spellings) {
      const res = await limited.api("GET", "/v1/users/me", { key: null, headers: { authorization } });
      statuses.push(res.status);
    }
    assert.deepEqual(statuses, [200, 200, 200, 429]);
  } finally {
    await limited.close();
  }
});

test("FOUNT_RATE_LIMIT sets the limit, and 0 turns it off", async () => {
  const limited = await startServer({}, { FOUNT_RATE_LIMIT: "2" });
  try {
    await limited.api("GET", "/v1/users/me");
    await limited.api("GET", "/v1/users/me");
    assertApiError(await limited.api("GET", "/v1/users/me"), { status: 429, code: "rate_limited" });
  } finally {
    await limited.close();
  }
  for (let i = 0; i < 20; i++) assert.equal((await server.api("GET", "/v1/users/me")).status, 200);
});

test("org_id acts for an organization the caller belongs to, and is 404 for any other", async () => {
  const owner = await server.createUser(unique("org-owner"));
  const member = await server.createUser(unique("org-member"));
  const outsider = await server.createUser(unique("org-outsider"));
  const org = (
    await server.api("POST", "/v1/admin/orgs", { body: { orgname: unique("acme"), owner_id: owner.id } })
  ).body.data;
  assert.equal(
    (await server.api("POST", `/v1/admin/orgs/${org.id}/members`, { body: { user_id: member.id } })).status,
    200,
  );

  const hook = await createWebhook(owner.key, { org_id: org.id, name: "team" });
  assert.equal(hook.user_id, org.id, "the organization owns it");
  const personal = await createWebhook(owner.key, { name: "mine" });

  // Members see the organization's resources, on the org routes and with org_id.
  assert.equal((await server.api("GET", `/v1/webhooks/${hook.id}`, { key: member.key })).status, 200);
  const orgList = await server.api("GET", `/v1/orgs/${org.id}/webhooks`, { key: member.key });
  assert.deepEqual(
    orgList.body.data.map((w: any) => w.id),
    [hook.id],
  );
  const withOrg = await server.api("GET", `/v1/users/me/webhooks?org_id=${org.id}`, { key: member.key });
  assert.deepEqual(
    withOrg.body.data.map((w: any) => w.id),
    [hook.id],
  );
  // Without org_id, a list holds the caller's own resources only.
  const own = await server.api("GET", "/v1/users/me/webhooks", { key: owner.key });
  assert.deepEqual(
    own.body.data.map((w: any) => w.id),
    [personal.id],
  );
  assert.equal((await server.api("GET", `/v1/webhooks/${personal.id}`, { key: member.key })).status, 404);

  // A subscription made for the organization is listed for it.
  const sub = await server.api("POST", "/v1/subscriptions", {
    key: member.key,
    body: { org_id: org.id, emitter_id: "dc_*", listener_id: hook.id },
  });
  assert.equal(sub.status, 200, sub.text);
  const orgSubs = await server.api("GET", `/v1/orgs/${org.id}/subscriptions`, { key: owner.key });
  assert.deepEqual(
    orgSubs.body.data.map((s: any) => s.id),
    [sub.body.data.id],
  );

  // Outsiders, and organizations that do not exist, look the same: 404.
  for (const orgId of [org.id, "o_doesnotexist1"]) {
    for (const [method, path, body] of [
      ["GET", `/v1/orgs/${orgId}/webhooks`, undefined],
      ["GET", `/v1/orgs/${orgId}/subscriptions`, undefined],
      ["GET", `/v1/users/me/webhooks?org_id=${orgId}`, undefined],
      ["GET", `/v1/users/me?org_id=${orgId}`, undefined],
      ["POST", "/v1/webhooks", { url: "https://example.com/", org_id: orgId }],
      ["GET", `/v1/webhooks/${hook.id}`, undefined],
    ] as const) {
      const res = await server.api(method, path, { key: outsider.key, body });
      assertApiError(res, { status: 404, code: "not_found" }, `${method} ${path}`);
    }
  }

  // Leaving the organization ends access at once.
  assert.equal(
    (await server.api("DELETE", `/v1/admin/orgs/${org.id}/members?user_id=${member.id}`)).status,
    200,
  );
  assertApiError(await server.api("GET", `/v1/webhooks/${hook.id}`, { key: member.key }), { status: 404 });
  assertApiError(await server.api("GET", `/v1/orgs/${org.id}/webhooks`, { key: member.key }), {
    status: 404,
  });
});

test("HEAD answers like GET without a body, and needs the key too", async () => {
  const { key } = await server.createUser(unique("head"));
  const res = await server.api("HEAD", "/v1/users/me", { key });
  assert.equal(res.status, 200);
  assert.equal(res.text, "");
  assert.equal((await server.api("HEAD", "/v1/users/me", { key: null })).status, 401);
});
