import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startServer, type TestServer } from "../helpers.ts";
import { assertApiError, unique, walkerComponentCode } from "./openapi-walk.ts";

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(() => server.close());

/** A user with a webhook and (costlier: it starts the user's executor) a source of its own. */
async function tenant(name: string, withSource = true) {
  const user = await server.createUser(unique(name));
  const hook = await server.api("POST", "/v1/webhooks", {
    key: user.key,
    body: { url: "https://example.com/h" },
  });
  assert.equal(hook.status, 200, hook.text);
  let source = "dc_none";
  if (withSource) {
    const res = await server.api("POST", "/v1/sources", {
      key: user.key,
      body: { component_code: walkerComponentCode, name: unique("src") },
    });
    assert.equal(res.status, 200, res.text);
    source = res.body.data.id;
  }
  return { ...user, webhook: hook.body.data.id as string, source };
}

function subscribe(key: string, params: Record<string, string>, via: "body" | "query" = "body") {
  if (via === "body") return server.api("POST", "/v1/subscriptions", { key, body: params });
  return server.api("POST", `/v1/subscriptions?${new URLSearchParams(params)}`, { key });
}

async function listSubs(key: string): Promise<any[]> {
  const res = await server.api("GET", "/v1/users/me/subscriptions", { key });
  assert.equal(res.status, 200);
  return res.body.data;
}

test("a subscription from a source to a webhook is created from the body or the query", async () => {
  const t = await tenant("subs");
  const fromBody = await subscribe(t.key, { emitter_id: t.source, listener_id: t.webhook });
  assert.equal(fromBody.status, 200, fromBody.text);
  assert.match(fromBody.body.data.id, /^sub_[A-Za-z0-9]+$/);
  assert.deepEqual(fromBody.body.data, {
    id: fromBody.body.data.id,
    emitter_id: t.source,
    listener_id: t.webhook,
    event_name: "",
  });
  const fromQuery = await subscribe(
    t.key,
    { emitter_id: t.source, listener_id: t.webhook, event_name: "$errors" },
    "query",
  );
  assert.equal(fromQuery.status, 200, fromQuery.text);
  assert.equal(fromQuery.body.data.event_name, "$errors");
  // Pipedream's clients send the query with a JSON content type and an empty body.
  const emptyBody = await server.api(
    "POST",
    `/v1/subscriptions?emitter_id=${t.source}&listener_id=${t.webhook}&event_name=$logs`,
    { key: t.key, raw: "" },
  );
  assert.equal(emptyBody.status, 200, emptyBody.text);
});

test("creating the same subscription twice returns the existing one", async () => {
  const t = await tenant("idem");
  const params = { emitter_id: t.source, listener_id: t.webhook, event_name: "orders" };
  const first = await subscribe(t.key, params);
  const second = await subscribe(t.key, params, "query");
  assert.equal(second.status, 200);
  assert.deepEqual(second.body.data, first.body.data);
  // "default" and the empty name are the same channel.
  const a = await subscribe(t.key, { emitter_id: t.source, listener_id: t.webhook });
  const b = await subscribe(t.key, { emitter_id: t.source, listener_id: t.webhook, event_name: "default" });
  const c = await subscribe(t.key, { emitter_id: t.source, listener_id: t.webhook, event_name: "" });
  assert.equal(a.body.data.id, b.body.data.id);
  assert.equal(a.body.data.id, c.body.data.id);
  assert.equal(b.body.data.event_name, "");
  assert.equal((await listSubs(t.key)).length, 2);
});

test("event_name is empty, default, $errors, $logs or a custom channel name", async () => {
  const t = await tenant("names", false);
  for (const [given, stored] of [
    [undefined, ""],
    ["", ""],
    ["default", ""],
    ["$errors", "$errors"],
    ["$logs", "$logs"],
    ["orders.created", "orders.created"],
    ["a_b-c:d", "a_b-c:d"],
  ] as const) {
    const params: Record<string, string> = { emitter_id: "dc_*", listener_id: t.webhook };
    if (given !== undefined) params.event_name = given;
    const res = await subscribe(t.key, params);
    assert.equal(res.status, 200, `${given}: ${res.text}`);
    assert.equal(res.body.data.event_name, stored);
  }
  for (const bad of ["$nope", "has space", "x".repeat(65), "-leading", "ünï"]) {
    const res = await subscribe(t.key, { emitter_id: "dc_*", listener_id: t.webhook, event_name: bad });
    assertApiError(res, { status: 400, code: "invalid_parameter" }, bad);
    assert.equal(res.body.details.field, "event_name");
  }
});

test("the emitter is a source or workflow ID, or the glob dc_* or p_*", async () => {
  const t = await tenant("emitters");
  for (const emitter of ["dc_*", "p_*", t.source]) {
    const res = await subscribe(t.key, { emitter_id: emitter, listener_id: t.webhook });
    assert.equal(res.status, 200, `${emitter}: ${res.text}`);
    assert.equal(res.body.data.emitter_id, emitter);
  }
  for (const bad of ["*", "dc_", "wh_*", t.webhook, "sc_*", "dc_**", "dc_a*", "u_abc", "dc_a b"]) {
    const res = await subscribe(t.key, { emitter_id: bad, listener_id: t.webhook });
    assertApiError(res, { status: 400, code: "invalid_parameter" }, bad);
  }
  for (const unknown of ["dc_doesnotexist", "p_doesnotexist"]) {
    assertApiError(await subscribe(t.key, { emitter_id: unknown, listener_id: t.webhook }), {
      status: 404,
      code: "not_found",
    });
  }
  assertApiError(await subscribe(t.key, { listener_id: t.webhook }), {
    status: 400,
    code: "invalid_parameter",
  });
});

test("the listener is a source, workflow or webhook the caller can see, never a glob", async () => {
  const t = await tenant("listeners");
  const toSource = await subscribe(t.key, { emitter_id: "dc_*", listener_id: t.source });
  assert.equal(toSource.status, 200, toSource.text);
  for (const bad of ["dc_*", "wh_*", "o_abc", "sub_abc", ""]) {
    assertApiError(await subscribe(t.key, { emitter_id: "dc_*", listener_id: bad }), { status: 400 }, bad);
  }
  for (const unknown of ["wh_doesnotexist", "dc_doesnotexist", "p_doesnotexist"]) {
    assertApiError(
      await subscribe(t.key, { emitter_id: "dc_*", listener_id: unknown }),
      { status: 404 },
      unknown,
    );
  }
  assertApiError(await subscribe(t.key, { emitter_id: "dc_*" }), { status: 400, code: "invalid_parameter" });
});

test("another tenant's source or webhook is 404 as emitter or listener, and nothing is created", async () => {
  const mine = await tenant("mine");
  const theirs = await tenant("theirs");
  for (const params of [
    { emitter_id: theirs.source, listener_id: mine.webhook },
    { emitter_id: "dc_*", listener_id: theirs.webhook },
    { emitter_id: mine.source, listener_id: theirs.source },
  ]) {
    assertApiError(
      await subscribe(mine.key, params),
      { status: 404, code: "not_found" },
      JSON.stringify(params),
    );
  }
  assert.deepEqual(await listSubs(mine.key), []);
  assert.deepEqual(await listSubs(theirs.key), []);
});

test("GET /users/me/subscriptions lists the caller's subscriptions, newest first", async () => {
  const t = await tenant("list");
  const other = await tenant("list-other", false);
  await subscribe(other.key, { emitter_id: "dc_*", listener_id: other.webhook });
  const ids = [];
  for (const name of ["a", "b", "c"]) {
    ids.push(
      (await subscribe(t.key, { emitter_id: t.source, listener_id: t.webhook, event_name: name })).body.data
        .id,
    );
  }
  const subs = await listSubs(t.key);
  assert.deepEqual(
    subs.map((s) => s.id),
    ids.reverse(),
  );
  for (const s of subs)
    assert.deepEqual(Object.keys(s).sort(), ["emitter_id", "event_name", "id", "listener_id"]);
});

test("DELETE /subscriptions removes the named channel; event_name= names the empty one", async () => {
  const t = await tenant("delete");
  const base = { emitter_id: t.source, listener_id: t.webhook };
  const unnamed = (await subscribe(t.key, base)).body.data;
  const errors = (await subscribe(t.key, { ...base, event_name: "$errors" })).body.data;
  const glob = (await subscribe(t.key, { emitter_id: "dc_*", listener_id: t.webhook })).body.data;

  const q = (extra: string) => `/v1/subscriptions?emitter_id=${t.source}&listener_id=${t.webhook}${extra}`;
  const removed = await server.api("DELETE", q("&event_name="), { key: t.key });
  assert.equal(removed.status, 200, removed.text);
  assert.deepEqual(removed.body.data, [unnamed]);
  assert.deepEqual(
    (await listSubs(t.key)).map((s) => s.id),
    [glob.id, errors.id],
  );
  assertApiError(await server.api("DELETE", q("&event_name="), { key: t.key }), {
    status: 404,
    code: "not_found",
  });

  const removedErrors = await server.api("DELETE", q("&event_name=%24errors"), { key: t.key });
  assert.deepEqual(removedErrors.body.data, [errors]);
  // `default` names the empty channel here too.
  const removedGlob = await server.api(
    "DELETE",
    `/v1/subscriptions?emitter_id=dc_*&listener_id=${t.webhook}&event_name=default`,
    { key: t.key },
  );
  assert.deepEqual(removedGlob.body.data, [glob]);
  assert.deepEqual(await listSubs(t.key), []);

  assertApiError(await server.api("DELETE", `/v1/subscriptions?listener_id=${t.webhook}`, { key: t.key }), {
    status: 400,
  });
});

test("DELETE /subscriptions cannot remove another tenant's subscription", async () => {
  const owner = await tenant("del-owner");
  const other = await tenant("del-other", false);
  const sub = (await subscribe(owner.key, { emitter_id: owner.source, listener_id: owner.webhook })).body
    .data;
  const res = await server.api(
    "DELETE",
    `/v1/subscriptions?emitter_id=${owner.source}&listener_id=${owner.webhook}&event_name=`,
    { key: other.key },
  );
  assertApiError(res, { status: 404, code: "not_found" });
  assert.deepEqual(await listSubs(owner.key), [sub]);
});

test("POST /auto_subscriptions stores a rule once, and sources created later are subscribed", async () => {
  const t = await tenant("auto");
  const rule = await server.api(
    "POST",
    `/v1/auto_subscriptions?event_name=$errors&listener_id=${t.webhook}`,
    {
      key: t.key,
    },
  );
  assert.equal(rule.status, 200, rule.text);
  assert.match(rule.body.data.id, /^asub_/);
  assert.equal(rule.body.data.listener_id, t.webhook);
  assert.equal(rule.body.data.event_name, "$errors");
  assert.ok(Number.isInteger(rule.body.data.created_at));
  const again = await server.api("POST", "/v1/auto_subscriptions", {
    key: t.key,
    body: { event_name: "$errors", listener_id: t.webhook },
  });
  assert.deepEqual(again.body.data, rule.body.data);

  // The source that existed before is not covered; one deployed now is.
  assert.deepEqual(await listSubs(t.key), []);
  const later = await server.api("POST", "/v1/sources", {
    key: t.key,
    body: { component_code: walkerComponentCode, name: unique("later") },
  });
  assert.equal(later.status, 200, later.text);
  const subs = await listSubs(t.key);
  assert.deepEqual(
    subs.map((s) => [s.emitter_id, s.listener_id, s.event_name]),
    [[later.body.data.id, t.webhook, "$errors"]],
  );

  assertApiError(
    await server.api("POST", `/v1/auto_subscriptions?listener_id=${t.webhook}`, { key: t.key }),
    { status: 400, code: "invalid_parameter" },
  );
  const other = await tenant("auto-other", false);
  assertApiError(
    await server.api("POST", `/v1/auto_subscriptions?event_name=default&listener_id=${other.webhook}`, {
      key: t.key,
    }),
    { status: 404, code: "not_found" },
  );
});

test("GET /orgs/{org_id}/subscriptions lists an organization's subscriptions to its members only", async () => {
  const owner = await tenant("org-subs", false);
  const outsider = await tenant("org-outsider", false);
  const org = (
    await server.api("POST", "/v1/admin/orgs", { body: { orgname: unique("subs-org"), owner_id: owner.id } })
  ).body.data;
  const sub = await subscribe(owner.key, { emitter_id: "p_*", listener_id: owner.webhook, org_id: org.id });
  assert.equal(sub.status, 200, sub.text);
  const listed = await server.api("GET", `/v1/orgs/${org.id}/subscriptions`, { key: owner.key });
  assert.deepEqual(listed.body.data, [sub.body.data]);
  // The user's own list holds only the user's own subscriptions.
  assert.deepEqual(await listSubs(owner.key), []);
  const withOrg = await server.api("GET", `/v1/users/me/subscriptions?org_id=${org.id}`, { key: owner.key });
  assert.deepEqual(withOrg.body.data, [sub.body.data]);
  assertApiError(await server.api("GET", `/v1/orgs/${org.id}/subscriptions`, { key: outsider.key }), {
    status: 404,
    code: "not_found",
  });
  assertApiError(await server.api("GET", "/v1/orgs/o_doesnotexist/subscriptions", { key: owner.key }), {
    status: 404,
  });
});
