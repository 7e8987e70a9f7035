/**
 * What a source can reach in a browser (docs/isolation.md): source endpoints answer on an origin of their
 * own (a listener of their own by default; a base URL or a `{id}` host pattern with FOUNT_ENDPOINT_URL),
 * the API and console never answer there and the API's origin serves no endpoint; every endpoint answer
 * is sandboxed unless the component opts out where that is safe; Fount's cookies and API keys never
 * reach a source or its events, and a source's answer never sets, replaces or clears Fount's cookies.
 */
import assert from "node:assert/strict";
import http from "node:http";
import { after, before, test } from "node:test";
import { deploy, emitted, events, fixture, hit } from "../fixtures/components/fixtures.ts";
import { adminKey, startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(() => server?.close());

/** A request through Node's client, which sends the Host it is given (fetch picks its own). */
function raw(
  base: string,
  path: string,
  options: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: any }> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: url.hostname, port: url.port, method: options.method ?? "GET", path, headers: options.headers },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (d: string) => {
          text += d;
        });
        res.on("end", () => {
          let body: unknown = text;
          try {
            body = text ? JSON.parse(text) : undefined;
          } catch {}
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body });
        });
      },
    );
    req.on("error", reject);
    req.end(options.body);
  });
}

/** Asks the answer-as-told source to answer `told`, sending `headers`; answers the answer. */
function tell(endpoint: string, told: Record<string, unknown>, headers: Record<string, string> = {}) {
  return hit(endpoint, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(told),
  });
}

test("a source's endpoint is on the endpoint listener; the API's origin serves no endpoint, the endpoint origin no API", async () => {
  const s = await deploy(server, { component_code: fixture("http-echo.mjs") });
  const endpoint: string = s.endpoint_url;
  assert.ok(endpoint.startsWith(`${server.endpoints}/e/`), endpoint);
  assert.notEqual(new URL(endpoint).origin, new URL(server.url).origin);
  assert.equal(s.configured_props.http.endpoint_url, endpoint);
  assert.equal((await hit(`${endpoint}/x?y=1`, { method: "POST", body: "{}" })).status, 200);
  const [seen] = await emitted(server, s.id);
  assert.equal(seen.endpoint, endpoint, "this.http.endpoint");
  assert.equal(seen.event.url, `${endpoint}/x?y=1`);

  // The API's listener answers endpoint paths with where endpoints are, and runs nothing.
  const onApi = await hit(`${server.url}${new URL(endpoint).pathname}`, { method: "POST", body: "{}" });
  assert.equal(onApi.status, 421);
  assert.equal(onApi.body.code, "wrong_origin");
  assert.deepEqual(onApi.body.details, { endpoints: `${server.endpoints}/e/{id}` });
  assert.equal((await events(server, s.id)).length, 1);

  // The endpoint listener answers nothing of the API or the console, even with the admin's key.
  const auth = { authorization: `Bearer ${adminKey}` };
  for (const path of ["/v1/users/me", "/", "/console/session", "/openapi.json", "/healthz", "/metrics"]) {
    const res = await hit(`${server.endpoints}${path}`, { headers: auth });
    assert.equal(res.status, 421, path);
    assert.equal(res.body.code, "wrong_origin", path);
    assert.match(res.body.error, new RegExp(`the API and the console are at ${server.url}`));
  }
  const create = await hit(`${server.endpoints}/v1/admin/users`, {
    method: "POST",
    headers: { ...auth, "content-type": "application/json" },
    body: JSON.stringify({ username: "through-endpoint", email: "t@example.com" }),
  });
  assert.equal(create.status, 421);
  assert.equal(await server.built.services.store.getUserByUsername("through-endpoint"), undefined);
});

test("every endpoint answer carries Content-Security-Policy: sandbox and nosniff, beside a policy of the component's", async () => {
  const echo = await deploy(server, { component_code: fixture("http-echo.mjs") });
  const told = await deploy(server, { component_code: fixture("answer-as-told.mjs") });
  const answers = {
    success: await hit(echo.endpoint_url, { method: "POST" }),
    unknown: await hit(`${server.endpoints}/e/doesnotexist0000`),
    misdirected: await hit(`${server.endpoints}/v1/users/me`),
    page: await tell(told.endpoint_url, { headers: { "content-type": "text/html" }, body: "<p>hi</p>" }),
    // On plain http the opt-out is not honoured: a script there could set cookies the console reads.
    optedOut: await tell(told.endpoint_url, { headers: { "content-type": "text/html" }, sandbox: false }),
    sniffable: await tell(told.endpoint_url, { headers: { "X-Content-Type-Options": "sniff-away" } }),
  };
  for (const [name, res] of Object.entries(answers)) {
    assert.equal(res.headers.get("content-security-policy"), "sandbox", name);
    assert.equal(res.headers.get("x-content-type-options"), "nosniff", name);
  }
  assert.equal(answers.success.status, 200);
  assert.equal(answers.page.text, "<p>hi</p>");
  const own = await tell(told.endpoint_url, { headers: { "Content-Security-Policy": "default-src 'none'" } });
  assert.equal(own.headers.get("content-security-policy"), "default-src 'none', sandbox");
  // A bad opt-out is the component's error, never a 5xx of Fount's making by surprise.
  assert.equal((await tell(told.endpoint_url, { sandbox: "no" })).status, 500);
});

test("Fount's cookies and API keys never reach a source or its events; other cookies and headers do", async () => {
  const told = await deploy(server, { component_code: fixture("answer-as-told.mjs") });
  const secret = "SESSION-SECRET-1";
  await tell(
    told.endpoint_url,
    {},
    {
      cookie: `a=1; fount_session=${secret}; __Host-fount_session=${secret}; FOUNT_SESSION=${secret}; __Secure-fount_other=${secret}; b=2`,
      authorization: `Bearer ${adminKey}`,
      "x-other": "kept",
    },
  );
  await tell(
    told.endpoint_url,
    {},
    { cookie: `fount_session=${secret}`, authorization: "Bearer theirs-123" },
  );
  await tell(
    told.endpoint_url,
    {},
    { cookie: `__Host-fount_session=${secret}`, authorization: "Basic dTpw" },
  );
  const [first, second, third] = await emitted(server, told.id);
  assert.equal(first.headers.cookie, "a=1; b=2");
  assert.equal(first.headers.authorization, undefined);
  assert.equal(first.headers["x-other"], "kept");
  assert.equal(second.headers.cookie, undefined, "nothing is left of a header of Fount's cookies only");
  assert.equal(second.headers.authorization, "Bearer theirs-123");
  assert.equal(third.headers.cookie, undefined);
  assert.equal(third.headers.authorization, "Basic dTpw");

  // A failing run keeps its event on $errors: that copy has none of them either.
  const thrower = await deploy(server, { component_code: fixture("thrower.mjs") });
  const failed = await hit(thrower.endpoint_url, {
    method: "POST",
    headers: { "content-type": "application/json", cookie: `fount_session=${secret}; c=3` },
    body: JSON.stringify({ fail: "this" }),
  });
  assert.equal(failed.status, 500);
  const [error] = await events(server, thrower.id, "$errors");
  assert.ok(JSON.stringify(error).includes("c=3"), JSON.stringify(error));
  for (const source of [told.id, thrower.id]) {
    for (const channel of [undefined, "$errors", "$logs"]) {
      const stored = JSON.stringify(await events(server, source, channel));
      assert.ok(!stored.includes(secret), `${source} ${channel ?? "default"}: ${stored}`);
      assert.ok(!stored.includes(adminKey), `${source} ${channel ?? "default"}`);
    }
  }
});

test("a component's answer never sets, replaces or clears Fount's cookies; its other cookies go out one per line", async () => {
  const told = await deploy(server, { component_code: fixture("answer-as-told.mjs") });
  const res = await tell(told.endpoint_url, {
    headers: {
      "Set-Cookie": [
        "fount_session=attacker; Path=/",
        "keep=1; Path=/",
        "__Host-fount_session=attacker; Path=/; Secure",
        "FOUNT_SESSION=attacker",
        "fount_session",
        " fount_session=spaced",
        "other=2; Expires=Wed, 21 Oct 2037 07:28:00 GMT",
      ],
      "set-cookie": "__Secure-fount_x=1; Secure",
      "SET-COOKIE": "late=3",
      "Clear-Site-Data": '"cookies"',
      "Service-Worker-Allowed": "/",
    },
  });
  assert.equal(res.status, 200);
  // On the console's host name (this server's), each is kept to the endpoint's path
  // (test/http/endpoint-cookies.test.ts).
  const scope = new URL(told.endpoint_url).pathname;
  assert.deepEqual(res.headers.getSetCookie(), [
    `keep=1; Path=${scope}`,
    `other=2; Expires=Wed, 21 Oct 2037 07:28:00 GMT; Path=${scope}`,
    `late=3; Path=${scope}`,
  ]);
  assert.equal(res.headers.get("clear-site-data"), null);
  assert.equal(res.headers.get("service-worker-allowed"), null, "a worker stays within its endpoint's path");
  const only = await tell(told.endpoint_url, { headers: { "set-cookie": "fount_session=attacker" } });
  assert.equal(only.headers.get("set-cookie"), null);
});

test("a preflight may ask for any header: the console's test request, cross-origin now, passes it", async () => {
  const echo = await deploy(server, { component_code: fixture("http-echo.mjs") });
  const preflight = await hit(echo.endpoint_url, {
    method: "OPTIONS",
    headers: {
      origin: server.url,
      "access-control-request-method": "POST",
      "access-control-request-headers": "content-type,x-custom",
    },
  });
  assert.equal(preflight.status, 204);
  assert.equal(preflight.headers.get("access-control-allow-origin"), "*");
  assert.equal(preflight.headers.get("access-control-allow-headers"), "content-type,x-custom");
  assert.equal(preflight.headers.get("access-control-allow-credentials"), null);
});

test("with a base FOUNT_ENDPOINT_URL, requests to the API's port naming its host are endpoint requests and nothing else", async () => {
  const hooked = await startServer({}, { FOUNT_ENDPOINT_URL: "http://hooks.test/" });
  try {
    const s = await deploy(hooked, { component_code: fixture("http-echo.mjs") });
    const endpoint: string = s.endpoint_url;
    assert.match(endpoint, /^http:\/\/hooks\.test\/e\/[a-z0-9]+$/);
    const path = new URL(endpoint).pathname;
    // A proxy may keep or drop the port: the host name decides.
    // A trailing dot (a fully qualified name) is the same host.
    for (const host of ["hooks.test", "HOOKS.test:8080", "hooks.test.", "hooks.test.:8080"]) {
      const res = await raw(hooked.url, `${path}/sub?q=1`, { method: "POST", headers: { host } });
      assert.equal(res.status, 200, host);
      assert.equal(res.headers["content-security-policy"], "sandbox");
      const api = await raw(hooked.url, "/v1/users/me", {
        headers: { host, authorization: `Bearer ${adminKey}` },
      });
      assert.equal(api.status, 421, host);
    }
    assert.equal((await emitted(hooked, s.id))[0].event.url, `${endpoint}/sub?q=1`);
    // The endpoint listener serves them whatever the Host; the API's, under its own Host, does not.
    assert.equal((await hit(`${hooked.endpoints}${path}`, { method: "POST" })).status, 200);
    const onApi = await hit(`${hooked.url}${path}`, { method: "POST" });
    assert.equal(onApi.status, 421);
    assert.deepEqual(onApi.body.details, { endpoints: "http://hooks.test/e/{id}" });
    assert.equal((await hooked.api("GET", "/v1/users/me")).status, 200);
  } finally {
    await hooked.close();
  }
});

test("with a host pattern, the endpoint ID comes from the Host, and a component may leave the sandbox only there on https", async () => {
  const patterned = await startServer(
    {},
    { PUBLIC_URL: "https://console.test", FOUNT_ENDPOINT_URL: "https://{id}.Hooks.test" },
  );
  try {
    const s = await deploy(patterned, { component_code: fixture("answer-as-told.mjs") });
    const endpoint: string = s.endpoint_url;
    const id = /^https:\/\/([a-z0-9]+)\.hooks\.test$/.exec(endpoint)?.[1];
    assert.ok(id, endpoint);
    const post = (base: string, host: string, told: Record<string, unknown> = {}, path = "/sub?x=1") =>
      raw(base, path, {
        method: "POST",
        headers: { host, "content-type": "application/json" },
        body: JSON.stringify(told),
      });
    assert.equal((await post(patterned.endpoints, `${id}.hooks.test`)).status, 200);
    assert.equal(
      (await post(patterned.endpoints, `${id.toUpperCase()}.HOOKS.TEST:443`, {}, "/")).status,
      200,
    );
    const [first, second] = await emitted(patterned, s.id);
    assert.equal(first.path, "/sub");
    assert.equal(first.url, `${endpoint}/sub?x=1`);
    assert.equal(first.endpoint, endpoint);
    assert.equal(second.path, "/");
    for (const host of [
      "127.0.0.1",
      "nope0.hooks.test",
      `a.${id}.hooks.test`,
      "hooks.test",
      "console.test",
    ]) {
      const res = await post(patterned.endpoints, host);
      assert.equal(res.status, 404, host);
      assert.equal(res.body.code, "not_found", host);
    }
    // The API's port: a host of the pattern is an endpoint host, never the API.
    assert.equal((await post(patterned.url, `${id}.hooks.test`)).status, 200);
    assert.equal((await post(patterned.url, `${id}.hooks.test.`)).status, 200);
    for (const host of ["other0.hooks.test", "other0.hooks.test.", "OTHER0.Hooks.Test.:443"]) {
      const notApi = await raw(patterned.url, "/v1/users/me", {
        headers: { host, authorization: `Bearer ${adminKey}` },
      });
      assert.equal(notApi.status, 404, host);
      assert.equal(notApi.body.code, "not_found", host);
    }
    const api = await raw(patterned.url, "/v1/users/me", {
      headers: { host: "console.test", authorization: `Bearer ${adminKey}` },
    });
    assert.equal(api.status, 200);

    // Both origins on https with host names of their own: the opt-out is honoured.
    const page = { headers: { "content-type": "text/html" }, body: "<script>1</script>" };
    const optedOut = await post(patterned.endpoints, `${id}.hooks.test`, { ...page, sandbox: false });
    assert.equal(optedOut.headers["content-security-policy"], undefined);
    assert.equal(optedOut.headers["x-content-type-options"], "nosniff");
    const own = await post(patterned.endpoints, `${id}.hooks.test`, {
      headers: { "content-security-policy": "script-src 'self'" },
      sandbox: false,
    });
    assert.equal(own.headers["content-security-policy"], "script-src 'self'");
    const kept = await post(patterned.endpoints, `${id}.hooks.test`, { ...page, sandbox: true });
    assert.equal(kept.headers["content-security-policy"], "sandbox");

    // The console may send its test request to any host of the pattern.
    const consolePage = await raw(patterned.url, "/", { headers: { host: "console.test" } });
    assert.match(
      String(consolePage.headers["content-security-policy"]),
      /connect-src 'self' https:\/\/\*\.hooks\.test;/,
    );
  } finally {
    await patterned.close();
  }
});

test("on one endpoint host shared by every endpoint, even on https, a component's answer stays sandboxed", async () => {
  const shared = await startServer(
    {},
    { PUBLIC_URL: "https://console.test", FOUNT_ENDPOINT_URL: "https://hooks.test" },
  );
  try {
    const s = await deploy(shared, { component_code: fixture("answer-as-told.mjs") });
    const path = new URL(s.endpoint_url).pathname;
    const res = await raw(shared.endpoints, path, {
      method: "POST",
      headers: { host: "hooks.test", "content-type": "application/json" },
      body: JSON.stringify({
        headers: { "content-type": "text/html" },
        body: "<script>1</script>",
        sandbox: false,
      }),
    });
    assert.equal(res.status, 200);
    // Its script would share an origin with every other tenant's endpoint pages.
    assert.equal(res.headers["content-security-policy"], "sandbox");
  } finally {
    await shared.close();
  }
});
