/**
 * AttemptDeadlines: one timer for the deadlines of all attempts in flight. Real (short) timeouts, since
 * the sender's deadlines run on Node's timers as the per-attempt timers they replace did.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { AttemptDeadlines } from "../../src/delivery/attempt-deadlines.ts";

/** Resolves once `expired` has seen `n` keys, with them in the order it saw them. */
function collector(n: number) {
  const seen: string[] = [];
  const { promise, resolve } = Promise.withResolvers<string[]>();
  const deadlines = new AttemptDeadlines<string>((key) => {
    seen.push(key);
    if (seen.length === n) resolve(seen);
  });
  return { deadlines, all: promise, seen };
}

test("attempts expire in the order of their deadlines, whatever the order they were added in", async () => {
  const { deadlines, all } = collector(3);
  deadlines.add("late", 120);
  deadlines.add("early", 10);
  deadlines.add("middle", 60);
  assert.deepEqual(await all, ["early", "middle", "late"]);
  assert.equal(deadlines.size, 0);
});

test("an attempt forgotten before its deadline never expires; the others still do", async () => {
  const { deadlines, all, seen } = collector(1);
  deadlines.add("answered", 10);
  deadlines.add("silent", 40);
  deadlines.forget("answered");
  assert.deepEqual(await all, ["silent"]);
  // Past the first deadline too: nothing else was called.
  await new Promise((r) => setTimeout(r, 30));
  assert.deepEqual(seen, ["silent"]);
});

test("an attempt added from the expiry of another gets its own deadline", async () => {
  const seen: string[] = [];
  const { promise, resolve } = Promise.withResolvers<void>();
  const started = performance.now();
  const deadlines: AttemptDeadlines<string> = new AttemptDeadlines((key) => {
    seen.push(key);
    if (key === "first") deadlines.add("second", 30);
    else resolve();
  });
  deadlines.add("first", 10);
  await promise;
  assert.deepEqual(seen, ["first", "second"]);
  assert.ok(performance.now() - started >= 39, "the second waited its own 30 ms after the first");
});
