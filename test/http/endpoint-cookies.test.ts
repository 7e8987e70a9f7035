/**
 * The cookies a component's answer sets, and the console's session beside them (docs/operations.md,
 * "One host name, endpoints on another port of it"): every cookie leaves host-only (no `Domain`); where
 * endpoints share the console's host name (the default: 127.0.0.1 on two ports) each is kept to its
 * endpoint's path, so a tenant cannot fill the console's requests with its cookies (a cookie bomb that
 * made every console request 413); with a host name of their own the component's `Path` stays; nameless
 * cookies (sent as their value alone, which reads as `name=value`) never leave; and a request naming the
 * session cookie twice is signed in as nobody, so a shadowing cookie cannot pick the session.
 */
import assert from "node:assert/strict";
import http from "node:http";
import { after, before, test } from "node:test";
import { deploy, fixture, hit } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(() => server?.close());

/** What a cookie-bombing tenant answers: cookies of about 4 KB each, for every path, for a year. */
const bomb = Array.from({ length: 8 }, (_, i) => `t${i}=${"x".repeat(3900)}; Path=/; Max-Age=31536000`);

/** The cookies every test asks the answer-as-told source to set. */
const told = [
  ...bomb,
  "a=1; Domain=127.0.0.1; Path=/",
  "b=2; Path=/sub; domain=.example.com; Secure; HttpOnly",
  "c=3",
  "d=4; Path=nowhere; Max-Age=60",
  "=fount_session=attacker; Path=/v1",
  " =also-nameless; Path=/",
  "noequals; Path=/",
  "fount_session=attacker; Path=/",
];

/** The Set-Cookie lines of the answer-as-told source at `base` (Host `host`) answering `told`. */
function setCookies(base: string, path: string, host?: string): Promise<string[]> {
  const url = new URL(base);
  const body = JSON.stringify({ headers: { "set-cookie": told } });
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: url.hostname,
        port: url.port,
        method: "POST",
        path,
        // The answer's head is about 32 KB: over Node's default 16 KB.
        maxHeaderSize: 64 * 1024,
        headers: { "content-type": "application/json", ...(host ? { host } : {}) },
      },
      (res) => {
        res.resume();
        res.on("end", () => {
          assert.equal(res.statusCode, 200);
          resolve(res.headers["set-cookie"] ?? []);
        });
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

test("on the console's host name, a component's cookies are kept to its endpoint's path, host-only; nameless ones never leave", async () => {
  const s = await deploy(server, { component_code: fixture("answer-as-told.mjs") });
  const endpoint = new URL(s.endpoint_url as string);
  assert.equal(endpoint.hostname, new URL(server.url).hostname, "the default setup: one host name");
  const scope = endpoint.pathname;
  assert.match(scope, /^\/e\/[a-z0-9]+$/);
  const expected = [
    ...bomb.map((c) => `${c.replace("; Path=/", "")}; Path=${scope}`),
    `a=1; Path=${scope}`,
    `b=2; Secure; HttpOnly; Path=${scope}/sub`,
    `c=3; Path=${scope}`,
    `d=4; Max-Age=60; Path=${scope}`,
  ];
  assert.deepEqual(await setCookies(server.endpoints, scope), expected);
  // The same from a sub-path of the endpoint: the scope is the endpoint's, not the request's.
  assert.deepEqual(await setCookies(server.endpoints, `${scope}/deep/er?q=1`), expected);
});

test("endpoints sharing a host of their own keep cookies to each endpoint; one host each keeps the component's Path", async () => {
  // Every endpoint on one host: one tenant's cookie would reach every other tenant's endpoint.
  const hooked = await startServer({}, { FOUNT_ENDPOINT_URL: "http://hooks.test/" });
  try {
    const s = await deploy(hooked, { component_code: fixture("answer-as-told.mjs") });
    const path = new URL(s.endpoint_url as string).pathname;
    assert.deepEqual(await setCookies(hooked.endpoints, path, "hooks.test"), [
      ...bomb.map((c) => `${c.replace("; Path=/", "")}; Path=${path}`),
      `a=1; Path=${path}`,
      `b=2; Secure; HttpOnly; Path=${path}/sub`,
      `c=3; Path=${path}`,
      `d=4; Max-Age=60; Path=${path}`,
    ]);
  } finally {
    await hooked.close();
  }
  const patterned = await startServer(
    {},
    { PUBLIC_URL: "https://console.test", FOUNT_ENDPOINT_URL: "https://{id}.hooks.test" },
  );
  try {
    const s = await deploy(patterned, { component_code: fixture("answer-as-told.mjs") });
    const host = new URL(s.endpoint_url as string).host;
    const lines = await setCookies(patterned.endpoints, "/", host);
    assert.deepEqual(lines.slice(8, 10), ["a=1; Path=/", "b=2; Path=/sub; Secure; HttpOnly"]);
    assert.equal(lines.length, 12);
  } finally {
    await patterned.close();
  }
});

test("a request that names the session cookie twice is signed in as nobody, not as whichever comes first", async () => {
  const signIn = async (key: string) => {
    const res = await server.api("POST", "/console/session", {
      key: null,
      body: { api_key: key },
      headers: { "x-fount-console": "1" },
    });
    assert.equal(res.status, 200, res.text);
    const cookie = res.headers.get("set-cookie")?.split(";")[0];
    assert.ok(cookie?.startsWith("fount_session="), cookie);
    return cookie;
  };
  const mallory = await server.createUser("mallory-shadow");
  const victim = await server.createUser("victim-shadow");
  const theirs = await signIn(mallory.key);
  const mine = await signIn(victim.key);
  const me = (cookie: string) => server.api("GET", "/v1/users/me", { key: null, headers: { cookie } });
  const alone = await me(`a=1; ${mine}`);
  assert.equal(alone.status, 200);
  assert.equal(alone.body.data.username, "victim-shadow");
  // As a browser sends a shadow set for a longer path (or a nameless `=fount_session=…`): first.
  for (const cookie of [`${theirs}; ${mine}`, `${mine}; a=1; ${theirs}`, `${mine};${mine}`]) {
    const res = await me(cookie);
    assert.equal(res.status, 401, `${cookie.slice(0, 40)}…: ${res.text.slice(0, 200)}`);
    const session = await server.api("GET", "/console/session", { key: null, headers: { cookie } });
    assert.equal(session.body.data, null);
  }
});

test("nameless cookies are refused however their value reads, Fount's names with them", async () => {
  const s = await deploy(server, { component_code: fixture("answer-as-told.mjs") });
  const res = await hit(s.endpoint_url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      headers: {
        "Set-Cookie": ["=fount_session=attacker; Path=/v1", "=__Host-fount_session=x", "=plain", "ok=1"],
      },
    }),
  });
  assert.equal(res.status, 200);
  assert.deepEqual(res.headers.getSetCookie(), [`ok=1; Path=${new URL(s.endpoint_url).pathname}`]);
});
