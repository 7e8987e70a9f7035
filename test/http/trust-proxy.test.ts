/**
 * The client address (what the auth throttle counts, what a console session records) is the
 * connection's, unless FOUNT_TRUST_PROXY lists the proxy it comes through: only then is that proxy's
 * X-Forwarded-For believed. Bad values stop the start with one line naming the variable.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { ConfigError, loadConfig } from "../../src/config.ts";
import { startServer, type TestServer } from "../helpers.ts";
import { unique } from "./openapi-walk.ts";

const consoleHeaders = { "x-fount-console": "1" };
const forwardedFor = (address: string) => ({ "x-forwarded-for": address });

/** The address the server records for a sign-in made with these headers. */
async function signInAddress(server: TestServer, headers: Record<string, string>): Promise<string> {
  const user = await server.createUser(unique("addr"));
  const res = await server.api("POST", "/console/session", {
    key: null,
    body: { api_key: user.key },
    headers: { ...consoleHeaders, ...headers },
  });
  assert.equal(res.status, 200, res.text);
  const listed = await server.api("GET", "/v1/users/me/sessions", { key: user.key });
  return listed.body.data[0].address;
}

/** Throttle settings for these tests: three wrong keys per window. */
const throttleEnv = { FOUNT_AUTH_FAILURE_LIMIT: "3", FOUNT_AUTH_FAILURE_WINDOW_S: "600" };
let guesses = 0;
const wrong = () => `fnt_proxy${String(++guesses).padStart(28, "0")}`;

test("without FOUNT_TRUST_PROXY, X-Forwarded-For is ignored: the address is the connection's", async () => {
  const server = await startServer({}, throttleEnv);
  try {
    assert.equal(await signInAddress(server, forwardedFor("203.0.113.7")), "127.0.0.1");
    // Naming another address in each request does not escape the throttle.
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) {
      const res = await server.api("GET", "/v1/users/me", {
        key: wrong(),
        headers: forwardedFor(`198.51.100.${i + 1}`),
      });
      statuses.push(res.status);
    }
    assert.deepEqual(statuses, [401, 401, 401, 429]);
  } finally {
    await server.close();
  }
});

test("with FOUNT_TRUST_PROXY listing the proxy, its X-Forwarded-For names the client", async () => {
  const server = await startServer({}, { ...throttleEnv, FOUNT_TRUST_PROXY: "10.0.0.0/8, 127.0.0.1" });
  try {
    assert.equal(await signInAddress(server, forwardedFor("203.0.113.7")), "203.0.113.7");
    // Only the hops the trusted proxies added count: what the client wrote to the left is not believed.
    assert.equal(await signInAddress(server, forwardedFor("192.0.2.66, 203.0.113.8")), "203.0.113.8");
    assert.equal(await signInAddress(server, {}), "127.0.0.1", "a request that came direct");

    // Each client behind the proxy is throttled on its own.
    const from = (address: string, key: string) =>
      server.api("GET", "/v1/users/me", { key, headers: forwardedFor(address) });
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) statuses.push((await from("198.51.100.1", wrong())).status);
    assert.deepEqual(statuses, [401, 401, 401, 429]);
    assert.equal((await from("198.51.100.2", wrong())).status, 401, "another client");
  } finally {
    await server.close();
  }
});

test("X-Forwarded-For from a peer not in FOUNT_TRUST_PROXY is ignored, as is a component's through the API routing", async () => {
  const server = await startServer({}, { FOUNT_TRUST_PROXY: "10.0.0.0/8" });
  try {
    assert.equal(await signInAddress(server, forwardedFor("203.0.113.7")), "127.0.0.1");
  } finally {
    await server.close();
  }
  // Requests a component sends to api.pipedream.com run through `inject` as `executor:<owner>`
  // (docs/isolation.md): even with loopback trusted, a header the component writes names nobody.
  const trusting = await startServer({}, { FOUNT_TRUST_PROXY: "loopback" });
  try {
    const user = await trusting.createUser(unique("component"));
    const res = await trusting.built.app.inject({
      method: "POST",
      url: "/console/session",
      remoteAddress: `executor:${user.id}`,
      headers: { ...consoleHeaders, ...forwardedFor("203.0.113.9"), "content-type": "application/json" },
      payload: JSON.stringify({ api_key: user.key }),
    });
    assert.equal(res.statusCode, 200, res.body);
    const listed = await trusting.api("GET", "/v1/users/me/sessions", { key: user.key });
    assert.equal(listed.body.data[0].address, `executor:${user.id}`);
  } finally {
    await trusting.close();
  }
});

test("FOUNT_TRUST_PROXY takes addresses, CIDR ranges and proxy-addr's names, and refuses the rest", () => {
  assert.equal(loadConfig({}).trustProxy, false);
  assert.equal(loadConfig({ FOUNT_TRUST_PROXY: "" }).trustProxy, false);
  assert.deepEqual(loadConfig({ FOUNT_TRUST_PROXY: " 10.0.0.0/8 ,::1, Loopback,fd00::/8" }).trustProxy, [
    "10.0.0.0/8",
    "::1",
    "loopback",
    "fd00::/8",
  ]);
  for (const bad of ["true", "1", "2", "*", "10.0.0.0/33", "proxy.internal", "10.0.0.1,", "fd00::/129"]) {
    assert.throws(
      () => loadConfig({ FOUNT_TRUST_PROXY: bad }),
      (err: Error) => {
        assert.ok(err instanceof ConfigError, bad);
        assert.match(err.message, /^FOUNT_TRUST_PROXY must list the reverse proxies' addresses/);
        assert.doesNotMatch(err.message, /\n/);
        return true;
      },
      bad,
    );
  }
});
