/**
 * What a source can reach in a browser (docs/isolation.md), in Chromium: a free user's source answers a
 * page whose script tries to create a user through the admin API with the signed-in admin's session,
 * reads `document.cookie`, and whose answer tries to replace the session cookie; the admin opens it. No
 * user is created, the script sees no cookie, the admin's session is intact and the stored event holds
 * no cookie of Fount's. The page is sandboxed (its script does not run); with the sandbox taken off on
 * the way (as a component opting out would have it), the separate origin and the console's CSRF rule
 * still hold. A tenant's answer that sets many large cookies (a cookie bomb: on the same host name
 * they would make every console request too large to serve) leaves the console usable. The console's
 * "Send a test request", cross-origin now, sends no credentials.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { adminKey } from "../helpers.ts";
import { consoleSuite, openPage, signIn, skip, wait } from "./browser.ts";

const suite = consoleSuite();

/** The page: reports what its script saw and got in `#out`. */
function hostilePage(api: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Free stuff</title></head>
<body><pre id="out">script did not run</pre>
<script>
(async () => {
  const out = { ran: true, cookie: document.cookie, attempts: {} };
  const targets = { api: ${JSON.stringify(api)} + "/v1/admin/users", here: "/v1/admin/users" };
  for (const [name, url] of Object.entries(targets)) {
    try {
      const res = await fetch(url, {
        method: "POST",
        credentials: "include",
        headers: { "x-fount-console": "1", "content-type": "application/json" },
        body: JSON.stringify({ username: "pwned-" + name, email: name + "@pwned.example", plan: "paid" }),
      });
      out.attempts[name] = res.status;
    } catch (err) {
      out.attempts[name] = String(err);
    }
  }
  document.getElementById("out").textContent = JSON.stringify(out);
})();
</script></body></html>`;
}

/** `?mode=page`: the page; `?mode=cookies`: an answer that sets and clears cookies. Each visit is emitted. */
function hostileCode(api: string): string {
  return `export default {
  key: "hostile-page",
  name: "Hostile page",
  version: "0.0.1",
  type: "source",
  props: { http: { type: "$.interface.http", customResponse: true } },
  async run(event) {
    this.$emit({ headers: event.headers });
    if (event.query.mode === "cookies") {
      this.http.respond({
        status: 200,
        headers: {
          "set-cookie": [
            "fount_session=attacker; Path=/",
            "__Host-fount_session=attacker; Path=/; Secure",
            "tenant=1; Path=/",
          ],
          "clear-site-data": '"cookies"',
        },
        body: "ok",
      });
      return;
    }
    this.http.respond({
      status: 200,
      headers: { "content-type": "text/html; charset=utf-8" },
      body: ${JSON.stringify(hostilePage(api))},
    });
  },
};
`;
}

const echoCode = `export default {
  key: "header-echo",
  name: "Header echo",
  version: "0.0.1",
  type: "source",
  props: { http: "$.interface.http" },
  async run(event) { this.$emit({ headers: event.headers, body: event.body }); },
};
`;

test("a tenant's page opened by a signed-in admin acts as nobody; the admin's session stays the admin's", {
  skip,
}, async () => {
  const { server, browser } = suite;
  const mallory = await server.createUser("mallory");
  const made = await server.api("POST", "/v1/sources", {
    key: mallory.key,
    body: { component_code: hostileCode(server.url), name: "free-stuff" },
  });
  assert.equal(made.status, 200, made.text);
  const { id: hostileId, endpoint_url: endpoint } = made.body.data as { id: string; endpoint_url: string };

  const context = await browser.newContext();
  const { page, problems } = await openPage(context);
  await signIn(page, server.url, adminKey);
  await page.getByRole("heading", { name: "Sources", level: 1 }).waitFor({ timeout: wait });
  const sessionBefore = (await context.cookies()).find((c) => c.name === "fount_session");
  assert.ok(sessionBefore, "signed in");

  // As served: sandboxed, so its script does not run at all.
  const page1 = `${endpoint}?mode=page`;
  const victim = await context.newPage();
  const served = await victim.goto(page1);
  assert.equal(served?.status(), 200);
  assert.equal(served?.headers()["content-security-policy"], "sandbox");
  assert.equal(await victim.locator("#out").textContent(), "script did not run");

  // With the sandbox taken off on the way, the script runs on the endpoint origin: still nothing.
  await victim.route(page1, async (route) => {
    const response = await route.fetch();
    const headers = { ...response.headers() };
    delete headers["content-security-policy"];
    await route.fulfill({ response, headers });
  });
  await victim.goto(page1);
  await victim.locator("#out", { hasText: '"ran":true' }).waitFor({ timeout: wait });
  const seen = JSON.parse((await victim.locator("#out").textContent()) ?? "{}");
  assert.ok(!String(seen.cookie).includes("fount_"), `the script saw ${seen.cookie}`);
  // The API refuses the cross-origin request (no CORS preflight is granted); the endpoint origin has no API.
  assert.notEqual(seen.attempts.api, 200, JSON.stringify(seen));
  assert.equal(seen.attempts.here, 421, JSON.stringify(seen));
  const store = server.built.services.store;
  for (const name of ["pwned-api", "pwned-here"])
    assert.equal(await store.getUserByUsername(name), undefined, name);

  // An answer that sets Fount's cookies and clears the site's sets none and clears nothing; its own
  // cookie goes through.
  const cookieAnswer = await victim.goto(`${endpoint}?mode=cookies`);
  assert.equal(cookieAnswer?.status(), 200);
  await victim.close();
  const cookies = await context.cookies();
  assert.equal(cookies.find((c) => c.name === "fount_session")?.value, sessionBefore.value);
  assert.equal(
    cookies.find((c) => c.name === "__Host-fount_session"),
    undefined,
  );
  // Kept to the endpoint's path: it does not go to the console's (same host name, another port).
  const tenant = cookies.find((c) => c.name === "tenant");
  assert.equal(tenant?.value, "1");
  assert.equal(tenant?.path, new URL(endpoint).pathname);

  // The admin's console still acts as the admin.
  await page.goto(server.url);
  await page.getByRole("link", { name: "Admin" }).waitFor({ timeout: wait });
  const session = (await page.evaluate(async () => (await fetch("/console/session")).json())) as {
    data: { user: { username: string } };
  };
  assert.equal(session.data.user.username, "admin");

  // What the tenant stored of those visits holds no cookie of Fount's (the tenant's own, yes).
  const stored = await server.api("GET", `/v1/sources/${hostileId}/event_summaries?expand=event&limit=10`, {
    key: mallory.key,
  });
  assert.equal(stored.status, 200);
  assert.ok(stored.body.data.length >= 3, stored.text);
  assert.ok(!stored.text.includes("fount_session"), stored.text);
  assert.ok(!stored.text.includes(sessionBefore.value), stored.text);
  assert.deepEqual(problems, []);
  await context.close();
});

/** A source whose answer sets `count` cookies of about 4 KB each, for every path, for a year (a cookie bomb). */
function bombCode(count: number): string {
  return `export default {
  key: "cookie-bomb",
  name: "Cookie bomb",
  version: "0.0.1",
  type: "source",
  props: { http: { type: "$.interface.http", customResponse: true } },
  async run() {
    const big = "x".repeat(3900);
    const cookies = [];
    for (let i = 0; i < ${count}; i++) cookies.push("t" + i + "=" + big + "; Path=/; Max-Age=31536000");
    cookies.push("=fount_session=attacker; Path=/v1");
    this.http.respond({ status: 200, headers: { "set-cookie": cookies }, body: "ok" });
  },
};
`;
}

test("a tenant's endpoint that sets many large cookies leaves the console of whoever opens it usable", {
  skip,
}, async () => {
  const { server, browser } = suite;
  const mallory = await server.createUser("mallory-bomb");
  const made = await server.api("POST", "/v1/sources", {
    key: mallory.key,
    body: { component_code: bombCode(8), name: "cookie-bomb" },
  });
  assert.equal(made.status, 200, made.text);
  const endpoint = made.body.data.endpoint_url as string;
  // The default setup: the endpoints on another port of the console's host name, so cookies are shared.
  assert.equal(new URL(endpoint).hostname, new URL(server.url).hostname);

  const context = await browser.newContext();
  const { page, problems } = await openPage(context);
  await signIn(page, server.url, adminKey);
  await page.getByRole("heading", { name: "Sources", level: 1 }).waitFor({ timeout: wait });

  const victim = await context.newPage();
  assert.equal((await victim.goto(endpoint))?.status(), 200);
  await victim.close();
  // The browser took them all: about 31 KB of cookies.
  const bombs = (await context.cookies()).filter((c) => /^t\d$/.test(c.name));
  assert.equal(bombs.length, 8);

  // The console still loads, signed in (it answered 413 to everything before), and the API answers.
  assert.equal((await page.goto(server.url))?.status(), 200);
  await page.getByRole("heading", { name: "Sources", level: 1 }).waitFor({ timeout: wait });
  const me = (await page.evaluate(async () => {
    const res = await fetch("/v1/users/me");
    return { status: res.status, body: await res.json() };
  })) as { status: number; body: { data: { username: string } } };
  assert.equal(me.status, 200, JSON.stringify(me.body));
  assert.equal(me.body.data.username, "admin");
  // Each is kept to the endpoint's path, where the endpoint alone gets them.
  for (const c of bombs) assert.equal(c.path, new URL(endpoint).pathname, c.name);
  assert.deepEqual(problems, []);
  await context.close();
});

test("the console's test request goes to the endpoint origin without credentials", { skip }, async () => {
  const { server, browser } = suite;
  const made = await server.api("POST", "/v1/sources", { body: { component_code: echoCode, name: "echo" } });
  assert.equal(made.status, 200, made.text);
  const id = made.body.data.id as string;
  const context = await browser.newContext();
  const { page, problems } = await openPage(context);
  await signIn(page, server.url, adminKey);
  await page.getByRole("heading", { name: "Sources", level: 1 }).waitFor({ timeout: wait });
  await page.goto(`${server.url}/#/sources/${id}`);
  await page.getByRole("button", { name: "Send a test request" }).click();
  await page.getByText("Test request sent.").waitFor({ timeout: wait });
  const stored = await server.api("GET", `/v1/sources/${id}/event_summaries?expand=event&limit=10`);
  assert.equal(stored.body.data.length, 1, stored.text);
  const { headers, body } = stored.body.data[0].event;
  assert.equal(body.test, true);
  assert.equal(headers.origin, server.url, "sent from the console's origin to the endpoint's");
  assert.equal(headers.cookie, undefined, JSON.stringify(headers));
  assert.deepEqual(problems, []);
  await context.close();
});
