/**
 * Console sessions are their user's, not extra API keys: each expires, is listed and revoked by its user
 * and by an admin, ends at sign-out, and one user holds at most 20; the rate limit counts per user
 * however many sessions they open; with an https PUBLIC_URL the cookie is `__Host-fount_session`.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { maxSessionsPerUser, sessionSeconds } from "../../src/domain/accounts/sessions.ts";
import { FakeClock, startClockServer } from "../fixtures/components/fixtures.ts";
import { adminKey, type TestServer } from "../helpers.ts";
import { unique } from "./openapi-walk.ts";

const clock = new FakeClock("2026-03-01T12:00:00Z");
let server: TestServer;
before(async () => {
  server = await startClockServer(clock);
});
after(() => server.close());

const consoleHeader = { "x-fount-console": "1" };

/** A request as a browser or a client makes it: with a cookie, a key, both or neither. */
const call = (
  target: TestServer,
  method: string,
  path: string,
  options: { cookie?: string; key?: string; headers?: Record<string, string>; body?: unknown } = {},
) =>
  target.api(method, path, {
    key: options.key ?? null,
    body: options.body,
    headers: { ...options.headers, ...(options.cookie ? { cookie: options.cookie } : {}) },
  });

/** Signs in with `key`; the `name=value` of the session cookie. */
async function signIn(target: TestServer, key: string, cookie?: string): Promise<string> {
  const res = await call(target, "POST", "/console/session", {
    body: { api_key: key },
    headers: { ...consoleHeader, "user-agent": "test-browser/1.0" },
    cookie,
  });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  const set = res.headers.get("set-cookie");
  assert.ok(set, "a session cookie is set");
  return set.split(";")[0]!;
}

const me = (target: TestServer, cookie: string) => call(target, "GET", "/v1/users/me", { cookie });

test("a user lists their sessions and ends one; the browser holding it is signed out", async () => {
  const alice = await server.createUser(unique("alice"));
  const first = await signIn(server, alice.key);
  clock.advance(1);
  const second = await signIn(server, alice.key);

  const listed = await call(server, "GET", "/v1/users/me/sessions", { cookie: first });
  assert.equal(listed.status, 200, JSON.stringify(listed.body));
  assert.equal(listed.body.data.length, 2);
  const [newest, oldest] = listed.body.data;
  assert.equal(newest.created_at, oldest.created_at + 1, "newest first");
  assert.deepEqual(
    listed.body.data.map((s: any) => s.current),
    [false, true],
    "the session of this request is marked",
  );
  assert.equal(oldest.user_id, alice.id);
  assert.equal(oldest.expires_at - oldest.created_at, sessionSeconds);
  assert.equal(oldest.address, "127.0.0.1");
  assert.equal(oldest.user_agent, "test-browser/1.0");
  // With the key, no session is current.
  const byKey = await call(server, "GET", "/v1/users/me/sessions", { key: alice.key });
  assert.deepEqual(
    byKey.body.data.map((s: any) => s.current),
    [false, false],
  );

  // Ending one needs the console header when done by cookie, like any change.
  const forged = await call(server, "DELETE", `/v1/users/me/sessions/${newest.id}`, { cookie: first });
  assert.equal(forged.status, 403);
  assert.equal(forged.body.code, "csrf_rejected");
  const ended = await call(server, "DELETE", `/v1/users/me/sessions/${newest.id}`, {
    cookie: first,
    headers: consoleHeader,
  });
  assert.equal(ended.status, 200, JSON.stringify(ended.body));
  assert.deepEqual(ended.body.data, { id: newest.id, revoked: true });
  const out = await me(server, second);
  assert.equal(out.status, 401);
  assert.match(out.body.error, /session has ended/);
  assert.equal((await me(server, first)).status, 200);
  const again = await call(server, "DELETE", `/v1/users/me/sessions/${newest.id}`, { key: alice.key });
  assert.equal(again.status, 404);
});

test("another user can neither list nor end a user's sessions; an admin can", async () => {
  const alice = await server.createUser(unique("alice"));
  const bob = await server.createUser(unique("bob"));
  const cookie = await signIn(server, alice.key);
  const [session] = (await call(server, "GET", "/v1/users/me/sessions", { cookie })).body.data;

  // Bob's own list is his; Alice's session is not found among his, and the admin routes are closed to him.
  assert.deepEqual((await call(server, "GET", "/v1/users/me/sessions", { key: bob.key })).body.data, []);
  const notHis = await call(server, "DELETE", `/v1/users/me/sessions/${session.id}`, { key: bob.key });
  assert.equal(notHis.status, 404);
  for (const [method, path] of [
    ["GET", `/v1/admin/users/${alice.id}/sessions`],
    ["DELETE", `/v1/admin/users/${alice.id}/sessions/${session.id}`],
  ] as const) {
    const res = await call(server, method, path, { key: bob.key });
    assert.equal(res.status, 403, path);
    assert.equal(res.body.code, "forbidden");
  }
  assert.equal((await me(server, cookie)).status, 200, "Alice is still signed in");

  const listed = await call(server, "GET", `/v1/admin/users/${alice.id}/sessions`, { key: adminKey });
  assert.deepEqual(
    listed.body.data.map((s: any) => s.id),
    [session.id],
  );
  assert.equal(
    (await call(server, "GET", "/v1/admin/users/u_nobody/sessions", { key: adminKey })).status,
    404,
  );
  // A session is ended under its own user only.
  const wrongUser = await call(server, "DELETE", `/v1/admin/users/${bob.id}/sessions/${session.id}`, {
    key: adminKey,
  });
  assert.equal(wrongUser.status, 404);
  const revoked = await call(server, "DELETE", `/v1/admin/users/${alice.id}/sessions/${session.id}`, {
    key: adminKey,
  });
  assert.equal(revoked.status, 200, JSON.stringify(revoked.body));
  assert.equal((await me(server, cookie)).status, 401);
});

test("sign-out deletes the session; signing in again in the same browser ends its earlier session", async () => {
  const carol = await server.createUser(unique("carol"));
  const first = await signIn(server, carol.key);
  const second = await signIn(server, carol.key, first);
  assert.equal((await me(server, first)).status, 401, "the earlier session of this browser ended");
  const store = server.built.services.store;
  assert.equal((await store.listSessions(carol.id, 0)).length, 1);

  const out = await call(server, "DELETE", "/console/session", { cookie: second, headers: consoleHeader });
  assert.equal(out.status, 200);
  assert.equal(out.body.data.signed_out, true);
  assert.equal((await me(server, second)).status, 401);
  assert.deepEqual(await store.listSessions(carol.id, 0), [], "no row is left");
});

test("a session expires after 12 hours, and the sweep deletes it", async () => {
  const dave = await server.createUser(unique("dave"));
  const cookie = await signIn(server, dave.key);
  clock.advance(sessionSeconds - 1);
  assert.equal((await me(server, cookie)).status, 200);
  clock.advance(1);
  const expired = await me(server, cookie);
  assert.equal(expired.status, 401);
  assert.match(expired.body.error, /session has ended/);
  const listed = await call(server, "GET", `/v1/admin/users/${dave.id}/sessions`, { key: adminKey });
  assert.deepEqual(listed.body.data, [], "an expired session is not listed");

  const store = server.built.services.store;
  assert.equal((await store.listSessions(dave.id, 0)).length, 1, "kept until the sweep");
  assert.ok((await server.built.services.sessions.sweep()) >= 1);
  assert.deepEqual(await store.listSessions(dave.id, 0), []);
});

test("300 sign-ins leave the newest 20 sessions and make no API key", async () => {
  const erin = await server.createUser(unique("erin"));
  const cookies: string[] = [];
  // Ten at a time, so that concurrent sign-ins of one user are capped too.
  for (let batch = 0; batch < 30; batch++) {
    clock.advance(1);
    cookies.push(...(await Promise.all(Array.from({ length: 10 }, () => signIn(server, erin.key)))));
  }
  const listed = await call(server, "GET", `/v1/admin/users/${erin.id}/sessions`, { key: adminKey });
  assert.equal(listed.body.data.length, maxSessionsPerUser);
  assert.equal((await server.built.services.store.listSessions(erin.id, 0)).length, maxSessionsPerUser);
  assert.equal((await me(server, cookies[0]!)).status, 401, "the oldest session ended");
  assert.equal((await me(server, cookies.at(-1)!)).status, 200);
  const keys = await call(server, "GET", `/v1/admin/users/${erin.id}/keys`, { key: adminKey });
  assert.deepEqual(
    keys.body.data.map((k: any) => k.name),
    ["default"],
  );
});

test("the rate limit counts per user: five sign-ins do not multiply it", async () => {
  const limited = await startClockServer(clock, { env: { FOUNT_RATE_LIMIT: "6" } });
  try {
    const frank = await limited.createUser(unique("frank"));
    const grace = await limited.createUser(unique("grace"));
    const cookies: string[] = [];
    for (let i = 0; i < 5; i++) cookies.push(await signIn(limited, frank.key));
    // Six requests in the minute, whichever of the user's sessions or key each comes with.
    const statuses: number[] = [];
    for (const cookie of cookies) statuses.push((await me(limited, cookie)).status);
    statuses.push((await call(limited, "GET", "/v1/users/me", { key: frank.key })).status);
    assert.deepEqual(statuses, [200, 200, 200, 200, 200, 200]);
    const over = await me(limited, cookies[4]!);
    assert.equal(over.status, 429);
    assert.equal(over.body.code, "rate_limited");
    assert.equal((await call(limited, "GET", "/v1/users/me", { key: frank.key })).status, 429);
    // Another user from the same address has a budget of their own.
    assert.equal((await call(limited, "GET", "/v1/users/me", { key: grace.key })).status, 200);
  } finally {
    await limited.close();
  }
});

test("with an https PUBLIC_URL the session cookie is __Host-fount_session, and only that name is read", async () => {
  const secure = await startClockServer(clock, { env: { PUBLIC_URL: "https://fount.example" } });
  try {
    const henry = await secure.createUser(unique("henry"));
    const res = await call(secure, "POST", "/console/session", {
      body: { api_key: henry.key },
      headers: consoleHeader,
    });
    const set = res.headers.get("set-cookie") ?? "";
    assert.match(set, /^__Host-fount_session=[^;]+; /);
    const attributes = set.split("; ").slice(1);
    for (const attribute of ["Path=/", "Secure", "HttpOnly", "SameSite=Strict"])
      assert.ok(attributes.includes(attribute), `${attribute} in ${set}`);
    assert.ok(!attributes.some((a) => /^domain=/i.test(a)), "no Domain");
    const cookie = set.split(";")[0]!;
    assert.equal((await me(secure, cookie)).status, 200);
    // The same value under the plain name could be planted by a plain-HTTP answer: not read.
    const plain = cookie.replace(/^__Host-/, "");
    assert.equal((await me(secure, plain)).status, 401);
    const out = await call(secure, "DELETE", "/console/session", { cookie, headers: consoleHeader });
    assert.match(
      out.headers.get("set-cookie") ?? "",
      /^__Host-fount_session=; Path=\/; .*Max-Age=0; Secure$/,
    );
  } finally {
    await secure.close();
  }
});
