/**
 * Console sessions, API keys and the rate limit on a cluster (two Fount processes on one PostgreSQL
 * schema): a session signed in through one node works through the other, ending it through either
 * refuses it on both at once, a key revoked through one node is refused by both though they cache keys,
 * and a user's keys and sessions share one rate limit across the nodes.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { apiClient } from "../helpers.ts";
import { type Cluster, startCluster } from "./nodes.ts";

let cluster: Cluster;
before(async () => {
  cluster = await startCluster(["s1", "s2"], { FOUNT_RATE_LIMIT: "8" });
});
after(async () => {
  await cluster?.stop();
});

const consoleHeader = { "x-fount-console": "1" };

test("a session works on every node, ends on every node at once, and counts for its user's one rate limit", async () => {
  const one = apiClient(cluster.node("s1").url);
  const two = apiClient(cluster.node("s2").url);
  const made = await one("POST", "/v1/admin/users", {
    body: { username: "roaming", email: "roaming@example.com" },
  });
  assert.equal(made.status, 200, made.text);
  const key = made.body.data.api_key as string;

  const signedIn = await one("POST", "/console/session", {
    key: null,
    body: { api_key: key },
    headers: consoleHeader,
  });
  assert.equal(signedIn.status, 200, signedIn.text);
  const cookie = (signedIn.headers.get("set-cookie") ?? "").split(";")[0]!;
  const asBrowser = { key: null, headers: { cookie } };

  // Eight requests in the minute for the user, through both nodes, by key and by session…
  const statuses: number[] = [];
  for (let i = 0; i < 4; i++) {
    statuses.push((await two("GET", "/v1/users/me", asBrowser)).status);
    statuses.push((await one("GET", "/v1/users/me", { key })).status);
  }
  assert.deepEqual(statuses, Array(8).fill(200));
  // …and the ninth, on either node and with either credential, is over the limit.
  assert.equal((await one("GET", "/v1/users/me", asBrowser)).status, 429);
  assert.equal((await two("GET", "/v1/users/me", { key })).status, 429);

  // Signing out through the second node ends the session on the first at once.
  const out = await two("DELETE", "/console/session", {
    ...asBrowser,
    headers: { cookie, ...consoleHeader },
  });
  assert.equal(out.status, 200, out.text);
  assert.equal(out.body.data.signed_out, true);
  for (const node of [one, two]) {
    const res = await node("GET", "/console/session", asBrowser);
    assert.equal(res.body.data, null);
  }
  const sessions = await one("GET", `/v1/admin/users/${made.body.data.id}/sessions`);
  assert.deepEqual(sessions.body.data, []);
});

test("a key revoked through one node is refused by the other within 1 s, though both had it cached", async () => {
  const one = apiClient(cluster.node("s1").url);
  const two = apiClient(cluster.node("s2").url);
  const made = await one("POST", "/v1/admin/users", {
    body: { username: "revoked-everywhere", email: "revoked@example.com" },
  });
  assert.equal(made.status, 200, made.text);
  const { api_key: key, api_key_id: keyId } = made.body.data as { api_key: string; api_key_id: string };
  for (const node of [one, two]) assert.equal((await node("GET", "/v1/users/me", { key })).status, 200);

  assert.equal((await two("DELETE", `/v1/admin/keys/${keyId}`)).status, 200);
  assert.equal((await two("GET", "/v1/users/me", { key })).status, 401, "at once where it was revoked");
  const start = Date.now();
  for (;;) {
    const status = (await one("GET", "/v1/users/me", { key })).status;
    if (status === 401) break;
    assert.equal(status, 200);
    assert.ok(Date.now() - start < 1_000, "still accepted after 1 s");
    await new Promise((r) => setTimeout(r, 100));
  }
});
