import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startServer, type TestServer } from "../helpers.ts";
import { assertApiError, unique, walkerComponentCode } from "./openapi-walk.ts";

let server: TestServer;
before(async () => {
  // Quotas from the environment, so that the test sees they are the configured ones.
  server = await startServer(
    {},
    {
      FOUNT_FREE_DAILY_INVOCATIONS: "1234",
      FOUNT_FREE_DAILY_COMPUTE_MS: "56789",
      FOUNT_FREE_DAILY_STORED_BYTES: "987654",
    },
  );
});
after(() => server.close());

const dailyFields = [
  "daily_compute_time_quota",
  "daily_compute_time_used",
  "daily_invocations_quota",
  "daily_invocations_used",
  "daily_stored_bytes_quota",
  "daily_stored_bytes_used",
];
const billingFields = ["billing_period_start_ts", "billing_period_end_ts", "billing_period_invocations"];

test("a free account shows its identity, organizations and daily quota fields", async () => {
  const user = await server.createUser(unique("free"), "free");
  const res = await server.api("GET", "/v1/users/me", { key: user.key });
  assert.equal(res.status, 200);
  const me = res.body.data;
  assert.equal(me.id, user.id);
  assert.match(me.username, /^free-/);
  assert.equal(me.email, `${me.username}@example.com`);
  assert.deepEqual(me.orgs, []);
  assert.equal(me.daily_invocations_quota, 1234);
  assert.equal(me.daily_compute_time_quota, 56789);
  assert.equal(me.daily_invocations_used, 0);
  assert.equal(me.daily_compute_time_used, 0);
  assert.equal(me.daily_stored_bytes_quota, 987654);
  assert.equal(me.daily_stored_bytes_used, 0);
  assert.deepEqual(Object.keys(me).sort(), ["email", "id", "orgs", "username", ...dailyFields].sort());
});

test("a paid account shows the billing period fields instead", async () => {
  const user = await server.createUser(unique("paid"), "paid");
  const me = (await server.api("GET", "/v1/users/me", { key: user.key })).body.data;
  for (const field of dailyFields) assert.ok(!(field in me), field);
  const now = new Date();
  assert.equal(me.billing_period_start_ts, Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1) / 1000);
  assert.equal(me.billing_period_end_ts, Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1) / 1000);
  assert.equal(me.billing_period_invocations, 0);
  assert.deepEqual(Object.keys(me).sort(), ["email", "id", "orgs", "username", ...billingFields].sort());
});

test("the bootstrap admin is a paid account", async () => {
  const me = (await server.api("GET", "/v1/users/me")).body.data;
  assert.equal(me.username, "admin");
  assert.ok("billing_period_start_ts" in me);
});

test("orgs lists every organization the user belongs to, with name, id, orgname and email", async () => {
  const owner = await server.createUser(unique("owner"));
  const member = await server.createUser(unique("member"));
  const orgname = unique("team");
  const org = (
    await server.api("POST", "/v1/admin/orgs", {
      body: { orgname, name: "The Team", email: "team@example.com", owner_id: owner.id },
    })
  ).body.data;
  await server.api("POST", `/v1/admin/orgs/${org.id}/members`, { body: { user_id: member.id } });
  const expected = [{ id: org.id, name: "The Team", orgname, email: "team@example.com" }];
  for (const u of [owner, member]) {
    const me = (await server.api("GET", "/v1/users/me", { key: u.key })).body.data;
    assert.deepEqual(me.orgs, expected);
  }
});

test("invocations count toward the day's usage (free) or the billing period (paid)", async () => {
  for (const plan of ["free", "paid"] as const) {
    const user = await server.createUser(unique(`usage-${plan}`), plan);
    const source = await server.api("POST", "/v1/sources", {
      key: user.key,
      body: { component_code: walkerComponentCode, name: "usage" },
    });
    assert.equal(source.status, 200, source.text);
    for (let i = 0; i < 2; i++) {
      const run = await server.api("POST", `/v1/sources/${source.body.data.id}/run`, {
        key: user.key,
        body: {},
      });
      assert.equal(run.status, 200, run.text);
    }
    const me = (await server.api("GET", "/v1/users/me", { key: user.key })).body.data;
    if (plan === "free") {
      assert.equal(me.daily_invocations_used, 2);
      assert.ok(Number.isInteger(me.daily_compute_time_used) && me.daily_compute_time_used >= 0);
    } else {
      assert.equal(me.billing_period_invocations, 2);
    }
  }
});

test("users/me takes include and exclude, and ignores other parameters (as Pipedream's clients expect)", async () => {
  const user = await server.createUser(unique("params"));
  const only = await server.api("GET", "/v1/users/me?include=id,orgs", { key: user.key });
  assert.deepEqual(only.body.data, { id: user.id, orgs: [] });
  const without = await server.api("GET", "/v1/users/me?exclude=orgs,email", { key: user.key });
  assert.ok(!("orgs" in without.body.data) && !("email" in without.body.data));
  // An unknown parameter is ignored (issue 18): naming another user changes nothing, the caller is answered.
  const other = await server.api("GET", "/v1/users/me?user_id=u_other", { key: user.key });
  assert.equal(other.status, 200);
  assert.equal(other.body.data.id, user.id);
  assertApiError(await server.api("GET", "/v1/users/me?include=id&include=", { key: user.key }), {
    status: 400,
    code: "invalid_parameter",
  });
});
