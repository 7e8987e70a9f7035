/**
 * The search indexer (domain/events/search-indexer.ts) on a recorded store operation: a pass indexes
 * what was stored a second ago or more, batch after batch until one comes back short, and a failing pass
 * is reported and leaves the loop running.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { SearchIndexer } from "../../../src/domain/events/search-indexer.ts";

test("a pass indexes what was stored a second ago or more, in batches until one comes back short", async () => {
  const calls: Array<[number, number]> = [];
  const answers = [200, 200, 7];
  const indexer = new SearchIndexer({
    index: async (storedBeforeMs, limit) => {
      calls.push([storedBeforeMs, limit]);
      return answers.shift() ?? 0;
    },
    clock: { now: () => 50_000 },
    onError: (err) => assert.fail(String(err)),
  });
  assert.equal(await indexer.pass(), 407);
  assert.deepEqual(calls, [
    [49_000, 200],
    [49_000, 200],
    [49_000, 200],
  ]);
});

test("a failed pass is reported and the next one runs", async () => {
  let calls = 0;
  const errors: unknown[] = [];
  const indexer = new SearchIndexer({
    index: async () => {
      calls++;
      if (calls === 1) throw new Error("store away");
      return 0;
    },
    clock: { now: () => Date.now() },
    onError: (err) => errors.push(err),
    delayMs: 1,
  });
  const second = new Promise<void>((resolve) => {
    const check = setInterval(() => {
      if (calls < 2) return;
      clearInterval(check);
      resolve();
    }, 1);
  });
  indexer.start();
  indexer.start();
  await second;
  await indexer.stop();
  assert.equal(calls, 2, "one loop, which went on after the failure");
  assert.deepEqual(
    errors.map((e) => (e as Error).message),
    ["store away"],
  );
});
