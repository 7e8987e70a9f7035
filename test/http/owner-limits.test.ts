/**
 * One owner's count of sources, webhooks, workflows and app accounts is bounded
 * (`FOUNT_MAX_*_PER_OWNER`): past it a create is a 409 `too_many_resources` and stores nothing, another
 * owner (or the same user acting for an organization) is not held by it, and a delete makes room.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startServer, type TestServer } from "../helpers.ts";
import { assertApiError } from "./openapi-walk.ts";

const code = `export default { name: "limited", version: "1", async run() {} }`;

let server: TestServer;
before(async () => {
  server = await startServer(
    {},
    {
      FOUNT_MAX_SOURCES_PER_OWNER: "2",
      FOUNT_MAX_WEBHOOKS_PER_OWNER: "2",
      FOUNT_MAX_WORKFLOWS_PER_OWNER: "2",
      FOUNT_MAX_APP_ACCOUNTS_PER_OWNER: "2",
    },
  );
});
after(() => server.close());

const creates = {
  sources: { path: "/v1/sources", body: { component_code: code } },
  webhooks: { path: "/v1/webhooks", body: { url: "https://example.com/hook" } },
  workflows: { path: "/v1/workflows", body: { name: "wf" } },
  accounts: { path: "/v1/accounts", body: { app: "github", credentials: { token: "t" } } },
} as const;

const lists = {
  sources: "/v1/users/me/sources",
  webhooks: "/v1/users/me/webhooks",
  workflows: "/v1/users/me/workflows",
  accounts: "/v1/accounts",
} as const;

for (const [resource, create] of Object.entries(creates) as [
  keyof typeof creates,
  (typeof creates)[keyof typeof creates],
][]) {
  test(`${resource}: the third of one owner is a 409 and stores nothing; another owner and a delete make room`, async () => {
    const user = await server.createUser(`limit_${resource}`, "free");
    const other = await server.createUser(`limit_${resource}_other`, "free");
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) {
      const res = await server.api("POST", create.path, { key: user.key, body: create.body });
      assert.equal(res.status, 200, res.text);
      ids.push(res.body.data.id);
    }
    const refused = await server.api("POST", create.path, { key: user.key, body: create.body });
    assertApiError(refused, { status: 409, code: "too_many_resources" });
    assert.deepEqual(refused.body.details, { resource, limit: 2 });
    assert.equal(refused.headers.get("retry-after"), null);
    const listed = await server.api("GET", lists[resource], { key: user.key });
    assert.equal(listed.status, 200, listed.text);
    assert.equal(listed.body.data.length, 2, "nothing was stored");
    // Another owner is not held by this one's count.
    const theirs = await server.api("POST", create.path, { key: other.key, body: create.body });
    assert.equal(theirs.status, 200, theirs.text);
    // A delete makes room again.
    const deleted = await server.api("DELETE", `${create.path}/${ids[0]}`, { key: user.key });
    assert.ok(deleted.status < 300, deleted.text);
    const again = await server.api("POST", create.path, { key: user.key, body: create.body });
    assert.equal(again.status, 200, again.text);
  });
}

test("an organization's resources count for the organization, not for the member who creates them", async () => {
  const member = await server.createUser("limit_member", "free");
  const org = await server.api("POST", "/v1/admin/orgs", {
    body: { orgname: "limitorg", owner_id: member.id },
  });
  assert.equal(org.status, 200, org.text);
  const orgId = org.body.data.id;
  for (let i = 0; i < 2; i++) {
    const own = await server.api("POST", "/v1/webhooks", { key: member.key, body: creates.webhooks.body });
    assert.equal(own.status, 200, own.text);
  }
  for (let i = 0; i < 2; i++) {
    const res = await server.api("POST", "/v1/webhooks", {
      key: member.key,
      body: { ...creates.webhooks.body, org_id: orgId },
    });
    assert.equal(res.status, 200, res.text);
  }
  const refused = await server.api("POST", "/v1/webhooks", {
    key: member.key,
    body: { ...creates.webhooks.body, org_id: orgId },
  });
  assertApiError(refused, { status: 409, code: "too_many_resources" });
});
