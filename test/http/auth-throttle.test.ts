/**
 * Guessing API keys: after FOUNT_AUTH_FAILURE_LIMIT wrong keys from one address within the window, that
 * address gets 429 `auth_throttled` with Retry-After for any key it has not used successfully before;
 * keys that already worked from it keep working, and the window's end lifts the throttle.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { AuthThrottle } from "../../src/http/auth-throttle.ts";
import { FakeClock, startClockServer } from "../fixtures/components/fixtures.ts";
import type { TestServer } from "../helpers.ts";
import { assertApiError, unique } from "./openapi-walk.ts";

const clock = new FakeClock("2026-03-01T12:00:00Z");
let server: TestServer;
before(async () => {
  server = await startClockServer(clock, {
    env: { FOUNT_AUTH_FAILURE_LIMIT: "5", FOUNT_AUTH_FAILURE_WINDOW_S: "60" },
  });
});
after(() => server.close());

const wrong = (n: number) => `fnt_guess${String(n).padStart(28, "0")}`;

async function me(key: string): Promise<{ status: number; headers: Headers; body: any; text: string }> {
  const res = await fetch(`${server.url}/v1/users/me`, { headers: { authorization: `Bearer ${key}` } });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, body: text ? JSON.parse(text) : undefined };
}

test("wrong keys from one address are throttled with 429 and Retry-After; keys known there keep working", async () => {
  const regular = await server.createUser(unique("regular"));
  const other = await server.createUser(unique("other"));
  assert.equal((await me(regular.key)).status, 200, "the regular client worked from this address");

  for (let i = 0; i < 5; i++) assertApiError(await me(wrong(i)), { status: 401, code: "unauthorized" });
  clock.advance(10);
  const throttled = await me(wrong(99));
  assertApiError(throttled, { status: 429, code: "auth_throttled" });
  assert.equal(throttled.headers.get("retry-after"), "50", "the rest of the 60 s window");

  assert.equal((await me(regular.key)).status, 200, "a key that worked from here before still works");
  assertApiError(await me(other.key), { status: 429, code: "auth_throttled" }, "a key new to this address");
  // Without any key there is nothing to guess: the usual 401.
  const none = await fetch(`${server.url}/v1/users/me`);
  assert.equal(none.status, 401);

  clock.advance(51);
  assert.equal((await me(other.key)).status, 200, "the window is over");
  assertApiError(await me(wrong(100)), { status: 401, code: "unauthorized" });
});

test("the throttle remembers a bounded number of addresses and keys", () => {
  const now = { ms: 0 };
  const throttle = new AuthThrottle({
    maxFailures: 2,
    windowMs: 1000,
    now: () => now.ms,
    maxAddresses: 100,
    goodKeysPerAddress: 2,
  });
  for (let i = 0; i < 10_000; i++) {
    throttle.failed(`10.0.${i >> 8}.${i & 255}`);
    throttle.succeeded(`10.1.${i >> 8}.${i & 255}`, `k${i}`);
  }
  assert.equal(throttle.size, 100);
  // The most recent addresses are the ones kept.
  throttle.failed("10.0.39.15");
  assert.ok(throttle.waitMs("10.0.39.15", "k") > 0, "the last address seen is still counted");
  for (const key of ["a", "b", "c"]) throttle.succeeded("192.0.2.1", key);
  throttle.failed("192.0.2.1");
  throttle.failed("192.0.2.1");
  assert.equal(throttle.waitMs("192.0.2.1", "c"), 0);
  assert.equal(throttle.waitMs("192.0.2.1", "b"), 0);
  assert.ok(throttle.waitMs("192.0.2.1", "a") > 0, "only the last two good keys are kept");
});
