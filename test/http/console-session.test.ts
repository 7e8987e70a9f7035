import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { adminKey, startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
before(async () => {
  server = await startServer({}, {}, { publishRegistry: true });
});
after(async () => {
  await server.close();
});

const consoleHeaders = { "x-fount-console": "1" };

async function signIn(key: string): Promise<{ status: number; cookie: string | undefined; body: any }> {
  const res = await server.api("POST", "/console/session", {
    key: null,
    body: { api_key: key },
    headers: consoleHeaders,
  });
  const setCookie = res.headers.get("set-cookie") ?? undefined;
  return { status: res.status, cookie: setCookie?.split(";")[0], body: res.body };
}

test("GET / serves the console page, its script and stylesheet, under a strict content policy", async () => {
  const page = await fetch(`${server.url}/`);
  assert.equal(page.status, 200);
  assert.match(page.headers.get("content-type") ?? "", /text\/html/);
  const policy = page.headers.get("content-security-policy") ?? "";
  assert.match(policy, /script-src 'self';/);
  const html = await page.text();
  // Styles: the console's files, and the editor's <style> with this page's nonce, new on every load.
  const nonce = /style-src 'self' 'nonce-([A-Za-z0-9+/=]{24})';/.exec(policy)?.[1];
  assert.ok(nonce, policy);
  assert.ok(html.includes(`<meta name="fount-style-nonce" content="${nonce}">`), html);
  const again = (await fetch(`${server.url}/`)).headers.get("content-security-policy") ?? "";
  assert.ok(!again.includes(nonce), "a new nonce per page");
  const script = /src="(\/console\/app\.js\?v=\w+)"/.exec(html)?.[1];
  const style = /href="(\/console\/app\.css\?v=\w+)"/.exec(html)?.[1];
  assert.ok(script && style, html);
  const js = await fetch(server.url + script);
  assert.equal(js.status, 200);
  assert.match(js.headers.get("content-type") ?? "", /javascript/);
  assert.ok((await js.text()).length > 1000);
  assert.equal((await fetch(server.url + style)).status, 200);
  // Lazily loaded parts are chunks next to app.js; other names are not served.
  const chunk = /chunk-\w+\.js/.exec(await (await fetch(server.url + script)).text())?.[0];
  assert.ok(chunk);
  assert.equal((await fetch(`${server.url}/console/${chunk}`)).status, 200);
  const missing = await server.api("GET", "/console/nothing.js", { key: null });
  assert.equal(missing.status, 404);
  assert.equal(missing.body.code, "not_found");
  assert.equal((await server.api("GET", "/console/..%2Fpackage.json", { key: null })).status, 400);
  // The API and its documents are where they were.
  assert.equal((await fetch(`${server.url}/openapi.json`)).status, 200);
  assert.equal((await server.api("GET", "/v1/users/me", { key: null })).status, 401);
});

test("signing in with a wrong key is refused and sets no cookie", async () => {
  const res = await signIn("fnt_notakey000000000000000000000000");
  assert.equal(res.status, 401);
  assert.equal(res.body.code, "unauthorized");
  assert.equal(res.cookie, undefined);
});

test("sign-in without the console header is refused (cross-site forms cannot add it)", async () => {
  const res = await server.api("POST", "/console/session", { key: null, body: { api_key: adminKey } });
  assert.equal(res.status, 403);
  assert.equal(res.body.code, "csrf_rejected");
});

test("a session cookie is HttpOnly and SameSite=Strict, does not carry the key in clear, and acts as the user", async () => {
  const alice = await server.createUser("alice-console");
  const res = await signIn(alice.key);
  assert.equal(res.status, 200);
  assert.equal(res.body.data.user.username, "alice-console");
  const raw = (
    await server.api("POST", "/console/session", {
      key: null,
      body: { api_key: alice.key },
      headers: consoleHeaders,
    })
  ).headers.get("set-cookie");
  assert.match(raw ?? "", /HttpOnly/);
  assert.match(raw ?? "", /SameSite=Strict/);
  assert.ok(res.cookie && !res.cookie.includes(alice.key));
  assert.ok(!res.cookie.includes("fnt_"));

  const me = await server.api("GET", "/v1/users/me", { key: null, headers: { cookie: res.cookie } });
  assert.equal(me.status, 200);
  assert.equal(me.body.data.username, "alice-console");
  const session = await server.api("GET", "/console/session", { key: null, headers: { cookie: res.cookie } });
  assert.equal(session.body.data.user.id, alice.id);
  // The page carries the session as data (no key in it), and is never cached.
  const page = await server.api("GET", "/", { key: null, headers: { cookie: res.cookie } });
  assert.match(page.text, /data-session="\{&quot;user&quot;:\{&quot;id&quot;:&quot;u_/);
  assert.ok(!page.text.includes("fnt_"));
  assert.equal(page.headers.get("cache-control"), "no-store");
  assert.match((await server.api("GET", "/", { key: null })).text, /data-session="null"/);

  // State-changing calls with the cookie need the console header.
  const forged = await server.api("POST", "/v1/webhooks", {
    key: null,
    headers: { cookie: res.cookie },
    body: { url: "https://example.com/hook" },
  });
  assert.equal(forged.status, 403);
  assert.equal(forged.body.code, "csrf_rejected");
  const made = await server.api("POST", "/v1/webhooks", {
    key: null,
    headers: { cookie: res.cookie, ...consoleHeaders },
    body: { url: "https://example.com/hook" },
  });
  assert.equal(made.status, 200, made.text);
});

test("a forged or tampered cookie is no session", async () => {
  const bob = await server.createUser("bob-console");
  const { cookie } = await signIn(bob.key);
  assert.ok(cookie);
  const tampered = `${cookie.slice(0, -3)}${cookie.endsWith("A") ? "B" : "A"}AA`;
  for (const c of [tampered, "fount_session=v1.a.b.c", `fount_session=${bob.key}`]) {
    const res = await server.api("GET", "/v1/users/me", { key: null, headers: { cookie: c } });
    assert.equal(res.status, 401, c);
    const s = await server.api("GET", "/console/session", { key: null, headers: { cookie: c } });
    assert.equal(s.status, 200);
    assert.equal(s.body.data, null);
  }
});

test("checking the session while signed out is not an error", async () => {
  const res = await server.api("GET", "/console/session", { key: null });
  assert.equal(res.status, 200);
  assert.equal(res.body.data, null);
});

test("sign-out ends the session on the server and clears the cookie; the user's key still works", async () => {
  const carol = await server.createUser("carol-console");
  const { cookie } = await signIn(carol.key);
  assert.ok(cookie);
  const listed = await server.api("GET", `/v1/admin/users/${carol.id}/sessions`);
  assert.equal(listed.body.data.length, 1);
  const out = await server.api("DELETE", "/console/session", {
    key: null,
    headers: { cookie, ...consoleHeaders },
  });
  assert.equal(out.status, 200);
  assert.equal(out.body.data.signed_out, true);
  assert.match(out.headers.get("set-cookie") ?? "", /Max-Age=0/);
  // The old cookie, replayed, no longer works.
  const replayed = await server.api("GET", "/v1/users/me", { key: null, headers: { cookie } });
  assert.equal(replayed.status, 401);
  assert.match(replayed.body.error, /session has ended/);
  assert.deepEqual((await server.api("GET", `/v1/admin/users/${carol.id}/sessions`)).body.data, []);
  // The user's own key still does, and signing in made no key.
  assert.equal((await server.api("GET", "/v1/users/me", { key: carol.key })).status, 200);
  const keys = await server.api("GET", `/v1/admin/users/${carol.id}/keys`);
  assert.deepEqual(
    keys.body.data.map((k: any) => k.name),
    ["default"],
  );
});

test("GET /v1/components/registry lists the registry's components and filters by q", async () => {
  const all = await server.api("GET", "/v1/components/registry");
  assert.equal(all.status, 200);
  const keys = all.body.data.map((c: any) => c.key);
  assert.ok(keys.includes("http-new-requests"), keys.join());
  assert.ok(keys.includes("schedule-cron"));
  const some = await server.api("GET", "/v1/components/registry?q=HTTP%20req");
  assert.deepEqual(
    some.body.data.map((c: any) => c.key),
    ["http-new-requests"],
  );
});

test("console sessions are rate-limited per user, not per address", async () => {
  const limited = await startServer({}, { FOUNT_RATE_LIMIT: "3" });
  try {
    const a = await limited.createUser("rate-a");
    const b = await limited.createUser("rate-b");
    const cookieOf = async (key: string) => {
      const res = await limited.api("POST", "/console/session", {
        key: null,
        body: { api_key: key },
        headers: consoleHeaders,
      });
      return (res.headers.get("set-cookie") ?? "").split(";")[0]!;
    };
    const [ca, cb] = [await cookieOf(a.key), await cookieOf(b.key)];
    const statuses = [];
    for (let i = 0; i < 4; i++)
      statuses.push(
        (await limited.api("GET", "/v1/users/me", { key: null, headers: { cookie: ca } })).status,
      );
    assert.deepEqual(statuses, [200, 200, 200, 429]);
    // Another user from the same address has a budget of their own.
    assert.equal(
      (await limited.api("GET", "/v1/users/me", { key: null, headers: { cookie: cb } })).status,
      200,
    );
  } finally {
    await limited.close();
  }
});

test("event_summaries with include or exclude keeps only those fields (it answered 500 before)", async () => {
  const dave = await server.createUser("dave-console");
  const made = await server.api("POST", "/v1/sources", {
    key: dave.key,
    body: { key: "http-new-requests", name: "times" },
  });
  assert.equal(made.status, 200, made.text);
  await fetch(made.body.data.endpoint_url, { method: "POST", body: "{}" });
  const path = `/v1/sources/${made.body.data.id}/event_summaries`;
  let res = await server.api("GET", `${path}?include=indexed_at_ms`, { key: dave.key });
  // The endpoint answers before the event is stored (docs/registry.md): wait for it.
  for (let i = 0; i < 240 && res.status === 200 && res.body.data.length === 0; i++) {
    await new Promise((r) => setTimeout(r, 250));
    res = await server.api("GET", `${path}?include=indexed_at_ms`, { key: dave.key });
  }
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(Object.keys(res.body.data[0]), ["indexed_at_ms"]);
  const without = await server.api("GET", `${path}?exclude=event,metadata`, { key: dave.key });
  assert.equal(without.status, 200, without.text);
  assert.deepEqual(Object.keys(without.body.data[0]).sort(), ["id", "indexed_at_ms"]);
});
