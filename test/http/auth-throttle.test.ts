/**
 * Guessing API keys: after FOUNT_AUTH_FAILURE_LIMIT (20) wrong keys from one address within the window,
 * further wrong keys from it get 429 `auth_throttled` with Retry-After instead of 401, until the window
 * ends. The throttle refuses guesses only: every valid key and console session keeps working from that
 * address, fresh ones included, and signing in is throttled like any request's key.
 */
import assert from "node:assert/strict";
import { after, before, beforeEach, test } from "node:test";
import { AuthThrottle } from "../../src/http/auth-throttle.ts";
import { FakeClock, startClockServer } from "../fixtures/components/fixtures.ts";
import { type ApiResponse, adminKey, type TestServer } from "../helpers.ts";
import { assertApiError, unique } from "./openapi-walk.ts";

const clock = new FakeClock("2026-03-01T12:00:00Z");
/** The defaults: 20 wrong keys per 300 s window. */
const limit = 20;
const windowS = 300;
let server: TestServer;
before(async () => {
  server = await startClockServer(clock);
});
after(() => server.close());
// Every test starts with the address's window over.
beforeEach(() => clock.advance(windowS));

let guesses = 0;
const wrong = () => `fnt_guess${String(++guesses).padStart(28, "0")}`;

const call = (
  method: string,
  path: string,
  options: { key?: string; cookie?: string; body?: unknown; console?: boolean } = {},
) =>
  server.api(method, path, {
    key: options.key ?? null,
    body: options.body,
    headers: {
      ...(options.cookie ? { cookie: options.cookie } : {}),
      ...(options.console ? { "x-fount-console": "1" } : {}),
    },
  });

const me = (key: string) => call("GET", "/v1/users/me", { key });
const signIn = (key: string) => call("POST", "/console/session", { body: { api_key: key }, console: true });
const cookieOf = (answer: ApiResponse) => answer.headers.get("set-cookie")?.split(";")[0] ?? "";

test("after 25 wrong keys from one address, wrong keys get 429 while valid keys and sessions, fresh ones too, keep working", async () => {
  // Five keys of other users used from this address before: the throttle kept four of them once.
  for (let i = 0; i < 5; i++)
    assert.equal((await me((await server.createUser(unique("used"))).key)).status, 200);
  const before = await server.createUser(unique("before"));
  const earlierSession = cookieOf(await signIn(before.key));

  const statuses: number[] = [];
  for (let i = 0; i < 25; i++) {
    const res = await me(wrong());
    statuses.push(res.status);
    if (res.status === 401) assertApiError(res, { status: 401, code: "unauthorized" });
  }
  assert.deepEqual(statuses, [...Array(limit).fill(401), ...Array(5).fill(429)]);
  clock.advance(10);
  const throttled = await me(wrong());
  assertApiError(throttled, { status: 429, code: "auth_throttled" });
  assert.equal(throttled.headers.get("retry-after"), String(windowS - 10), "the rest of the window");
  // The same wrong key again: refused the same way (from memory, without a lookup).
  const repeated = `fnt_repeat${"0".repeat(27)}`;
  for (let i = 0; i < 2; i++) assertApiError(await me(repeated), { status: 429, code: "auth_throttled" });

  // Valid credentials are never refused: the admin key, a key never used here, a session made before
  // the throttle, and one made while it holds.
  assert.equal((await me(adminKey)).status, 200);
  const fresh = await server.createUser(unique("fresh"));
  assert.equal((await me(fresh.key)).status, 200, "a key new to this address");
  assert.equal((await call("GET", "/v1/users/me", { cookie: earlierSession })).status, 200);
  const signedIn = await signIn(fresh.key);
  assert.equal(signedIn.status, 200, signedIn.text);
  const session = cookieOf(signedIn);
  assert.equal((await call("GET", "/v1/users/me", { cookie: session })).status, 200);
  const made = await call("POST", "/v1/webhooks", {
    cookie: session,
    console: true,
    body: { url: "https://example.com/hook" },
  });
  assert.equal(made.status, 200, made.text);
  // Without any key there is nothing to guess: the usual 401.
  assert.equal((await fetch(`${server.url}/v1/users/me`)).status, 401);

  clock.advance(windowS - 10);
  assertApiError(await me(wrong()), { status: 401, code: "unauthorized" }, "the window is over");
});

test("signing in with wrong keys counts toward the throttle like any request's key", async () => {
  for (let i = 0; i < limit; i++)
    assertApiError(await signIn(wrong()), { status: 401, code: "unauthorized" });
  const throttled = await signIn(wrong());
  assertApiError(throttled, { status: 429, code: "auth_throttled" });
  assert.equal(throttled.headers.get("set-cookie"), null);
  assertApiError(await me(wrong()), { status: 429, code: "auth_throttled" }, "the same address's count");
  const user = await server.createUser(unique("signs-in"));
  assert.equal((await signIn(user.key)).status, 200);
});

test("a forged or ended session cookie is refused with 401 and is not counted as a guess", async () => {
  const user = await server.createUser(unique("ended"));
  const session = cookieOf(await signIn(user.key));
  await call("DELETE", "/console/session", { cookie: session, console: true });
  for (let i = 0; i < limit + 5; i++) {
    assertApiError(await call("GET", "/v1/users/me", { cookie: session }), {
      status: 401,
      code: "unauthorized",
    });
    assertApiError(await call("GET", "/v1/users/me", { cookie: `fount_session=forged${i}` }), {
      status: 401,
      code: "unauthorized",
    });
  }
  assertApiError(await me(wrong()), { status: 401, code: "unauthorized" }, "no guess was counted");
});

test("the throttle remembers a bounded number of addresses and wrong keys", () => {
  const now = { ms: 0 };
  const throttle = new AuthThrottle({
    maxFailures: 2,
    windowMs: 1000,
    now: () => now.ms,
    maxAddresses: 100,
    badKeysPerAddress: 2,
  });
  for (let i = 0; i < 10_000; i++) throttle.failed(`10.0.${i >> 8}.${i & 255}`, `k${i}`);
  assert.equal(throttle.size, 100);
  // The most recent addresses are the ones kept.
  throttle.failed("10.0.39.15", "k");
  throttle.failed("10.0.39.15", "k");
  assert.ok(throttle.failed("10.0.39.15", "k") > 0, "the last address seen is still counted");

  assert.equal(throttle.failed("192.0.2.1", "a"), 0);
  assert.equal(throttle.failed("192.0.2.1", "b"), 0);
  assert.equal(throttle.knownBadMs("192.0.2.1", "a"), 0, "wrong keys within the allowance are looked up");
  for (const key of ["c", "d", "e"]) assert.equal(throttle.failed("192.0.2.1", key), 1000);
  assert.equal(throttle.knownBadMs("192.0.2.1", "e"), 1000);
  assert.equal(throttle.knownBadMs("192.0.2.1", "d"), 1000);
  assert.equal(throttle.knownBadMs("192.0.2.1", "c"), 0, "only the last two wrong keys are kept");
  now.ms = 1000;
  assert.equal(throttle.knownBadMs("192.0.2.1", "e"), 0, "the window is over");
});
