import assert from "node:assert/strict";
import { test } from "node:test";
import {
  maxAttempts,
  maxRetryAfterMs,
  parseRetryAfter,
  retryDelay,
  retryDelaysMs,
} from "../../src/delivery/schedule.ts";

test("failed attempts are retried after 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 10 h: eight attempts in all", () => {
  const middle = () => 0.5;
  assert.deepEqual(
    [1, 2, 3, 4, 5, 6, 7].map((n) => retryDelay(n, middle)),
    [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000],
  );
  assert.equal(retryDelay(8, middle), undefined);
  assert.equal(maxAttempts, 8);
  assert.equal(retryDelaysMs.length, 7);
});

test("retry delays move by at most ±10 %", () => {
  assert.equal(
    retryDelay(1, () => 0),
    4_500,
  );
  assert.equal(
    retryDelay(1, () => 0.999999),
    5_500,
  );
  for (let i = 0; i < 100; i++) {
    const d = retryDelay(2)!;
    assert.ok(d >= 270_000 && d <= 330_000, String(d));
  }
});

test("Retry-After is read as seconds or an HTTP date, at least 1 s and at most a day", () => {
  const now = Date.parse("2026-03-01T12:00:00Z");
  assert.equal(parseRetryAfter("120", now), 120_000);
  assert.equal(parseRetryAfter(["7"], now), 7_000);
  assert.equal(parseRetryAfter("0", now), 1_000);
  assert.equal(parseRetryAfter("Sun, 01 Mar 2026 12:00:30 GMT", now), 30_000);
  assert.equal(parseRetryAfter("Sun, 01 Mar 2026 11:00:00 GMT", now), 1_000, "a date in the past: soon");
  assert.equal(parseRetryAfter("999999999", now), maxRetryAfterMs);
  for (const bad of [undefined, "", "soon", "-5", "1.5"])
    assert.equal(parseRetryAfter(bad, now), undefined, String(bad));
});
