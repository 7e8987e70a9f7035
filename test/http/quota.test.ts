/**
 * Daily quotas of free accounts: with FOUNT_FREE_DAILY_INVOCATIONS=2 the third endpoint hit of the day
 * gets 429, manual runs too, timer ticks are skipped with one `$errors` event a day, /v1/users/me counts the
 * use, other accounts are untouched, and a new UTC day starts afresh. Runs on a fake clock.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import {
  deploy,
  emitted,
  events,
  FakeClock,
  fixture,
  hit,
  startClockServer,
} from "../fixtures/components/fixtures.ts";
import type { TestServer } from "../helpers.ts";

let server: TestServer;
const clock = new FakeClock("2026-04-10T08:00:00Z");

before(async () => {
  server = await startClockServer(clock, { env: { FOUNT_FREE_DAILY_INVOCATIONS: "2" } });
});
after(() => server.close());

async function me(key: string) {
  const res = await server.api("GET", "/v1/users/me", { key });
  assert.equal(res.status, 200, res.text);
  return res.body.data;
}

test("a free user's third endpoint hit of the day gets 429, and /v1/users/me shows the use", async () => {
  const user = await server.createUser("quota-free");
  const s = await deploy(server, { component_code: fixture("http-echo.mjs") }, user.key);
  const endpoint: string = s.configured_props.http.endpoint_url;
  const before = await me(user.key);
  assert.equal(before.daily_invocations_quota, 2);
  assert.equal(before.daily_invocations_used, 0);

  assert.equal((await hit(endpoint, { method: "POST" })).status, 200);
  assert.equal((await hit(endpoint, { method: "POST" })).status, 200);
  const third = await hit(endpoint, { method: "POST" });
  assert.equal(third.status, 429);
  assert.equal(third.body.code, "quota_exceeded");
  const retryAfter = Number(third.headers.get("retry-after"));
  assert.ok(
    retryAfter > 0 && retryAfter <= 16 * 3600,
    `retry-after ${retryAfter} s points at the next UTC day`,
  );

  const after = await me(user.key);
  assert.equal(after.daily_invocations_used, 2);
  assert.equal(typeof after.daily_compute_time_used, "number");
  assert.equal(typeof after.daily_compute_time_quota, "number");
  assert.equal((await emitted(server, s.id, user.key)).length, 2, "the refused hit did not run");

  const run = await server.api("POST", `/v1/sources/${s.id}/run`, { key: user.key, body: {} });
  assert.equal(run.status, 429);
  // The API itself still answers.
  assert.equal((await server.api("GET", `/v1/sources/${s.id}`, { key: user.key })).status, 200);
});

test("concurrent hits cannot take a free account past its quota", async () => {
  const user = await server.createUser("quota-burst");
  const s = await deploy(server, { component_code: fixture("http-echo.mjs") }, user.key);
  const endpoint: string = s.configured_props.http.endpoint_url;
  const statuses = (
    await Promise.all(Array.from({ length: 12 }, () => hit(endpoint, { method: "POST" })))
  ).map((r) => r.status);
  assert.equal(statuses.filter((st) => st === 200).length, 2, `statuses: ${statuses.join(", ")}`);
  assert.equal(statuses.filter((st) => st === 429).length, 10, `statuses: ${statuses.join(", ")}`);
  assert.equal((await me(user.key)).daily_invocations_used, 2);
  assert.equal((await emitted(server, s.id, user.key)).length, 2);
});

test("the quota is per account: another free user and a paid user are not limited by it", async () => {
  const spent = await server.createUser("quota-spent");
  const other = await server.createUser("quota-other");
  const paid = await server.createUser("quota-paid", "paid");
  const mine = await deploy(server, { component_code: fixture("http-echo.mjs") }, spent.key);
  for (let i = 0; i < 2; i++) await hit(mine.configured_props.http.endpoint_url, { method: "POST" });
  assert.equal((await hit(mine.configured_props.http.endpoint_url, { method: "POST" })).status, 429);

  const theirs = await deploy(server, { component_code: fixture("http-echo.mjs") }, other.key);
  assert.equal((await hit(theirs.configured_props.http.endpoint_url, { method: "POST" })).status, 200);
  const unlimited = await deploy(server, { component_code: fixture("http-echo.mjs") }, paid.key);
  for (let i = 0; i < 4; i++) {
    assert.equal((await hit(unlimited.configured_props.http.endpoint_url, { method: "POST" })).status, 200);
  }
  const paidMe = await me(paid.key);
  assert.equal(paidMe.daily_invocations_used, undefined);
  assert.equal(paidMe.billing_period_invocations, 4);
});

test("over the quota, timer ticks are skipped with one $errors event a day; a new UTC day starts afresh", async () => {
  clock.set("2026-04-11T08:00:00Z");
  const user = await server.createUser("quota-timer");
  const s = await deploy(server, { component_code: fixture("ticker.mjs") }, user.key);
  const { scheduler } = server.built.services;
  for (let i = 0; i < 2; i++) {
    clock.advance(60);
    assert.equal((await scheduler.tick()).length, 1);
  }
  // Three ticks past the quota: one note on $errors, not one a tick (a source ticking every second
  // would write one a second for the rest of the day).
  for (let i = 0; i < 3; i++) {
    clock.advance(60);
    await scheduler.tick();
  }
  await server.built.services.committer.drain();
  assert.equal((await emitted(server, s.id, user.key)).length, 2);
  const errors = await events(server, s.id, "$errors", user.key);
  assert.equal(errors.length, 1);
  assert.equal(errors[0].event.error.code, "quota_exceeded");
  assert.equal(errors[0].event.original_event.interval_seconds, 60);
  assert.equal((await me(user.key)).daily_invocations_used, 2);

  clock.set("2026-04-12T00:00:30Z");
  assert.equal((await me(user.key)).daily_invocations_used, 0, "a new UTC day");
  await scheduler.tick();
  assert.equal((await emitted(server, s.id, user.key)).length, 3);
  assert.equal((await me(user.key)).daily_invocations_used, 1);
  // The new day's quota used up too: its first skipped tick is noted again.
  for (let i = 0; i < 3; i++) {
    clock.advance(60);
    await scheduler.tick();
  }
  await server.built.services.committer.drain();
  assert.equal((await events(server, s.id, "$errors", user.key)).length, 2);
});
