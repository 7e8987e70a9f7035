/**
 * The spec's dedupe strategies, on its own examples: unique (a FIFO cache of 100 ids), greatest
 * (numeric ids, only larger ones pass) and last (only events after the cached id, all when none
 * matches), across runs; an emit without an id under dedupe is refused on `$errors`.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { deploy, events, fixture } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(() => server.close());

type Item = { id?: string | number; ts?: number; v?: string };

/** Runs the source on `items` and returns the ids it emitted, in stored order. */
async function pass(sourceId: string, items: Item[]): Promise<Array<string | number>> {
  const res = await server.api("POST", `/v1/sources/${sourceId}/run`, { body: { event: { items } } });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.data.ok, true, JSON.stringify(res.body.data.error));
  return res.body.data.emits.map((e: { event: Item }) => e.event.id);
}

const ids = (...list: Array<string | number>): Item[] => list.map((id) => ({ id }));
const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

test("unique: ids 1..101 are emitted; then 1 is emitted again (it left the cache) and 50 is not", async () => {
  const s = await deploy(server, { component_code: fixture("dedupe-unique.mjs") });
  assert.deepEqual(await pass(s.id, ids(...range(1, 101))), range(1, 101));
  assert.deepEqual(await pass(s.id, ids(1)), [1], "1 was pushed out first in, first out");
  assert.deepEqual(await pass(s.id, ids(50)), [], "50 is still among the last 100");
  // 1 re-entered and pushed out 2, the oldest left.
  assert.deepEqual(await pass(s.id, ids(2, 3, 101, 1)), [2]);
});

test("unique: duplicates within one run are emitted once", async () => {
  const s = await deploy(server, { component_code: fixture("dedupe-unique.mjs") });
  assert.deepEqual(await pass(s.id, ids("a", "b", "a", "c", "b")), ["a", "b", "c"]);
  assert.deepEqual(await pass(s.id, ids("c", "d")), ["d"]);
});

test("greatest: only ids larger than the largest seen are emitted, compared as numbers", async () => {
  const s = await deploy(server, { component_code: fixture("dedupe-greatest.mjs") });
  assert.deepEqual(await pass(s.id, ids(5, 3, 9, 7)), [5, 9]);
  assert.deepEqual(await pass(s.id, ids(8, 9, 10, "11", 100)), [10, "11", 100]);
  // Numeric, not lexical: "20" < 100.
  assert.deepEqual(await pass(s.id, ids("20", 99, 101)), [101]);
});

test("last: the first run emits all; later runs emit only what follows the cached last id", async () => {
  const s = await deploy(server, { component_code: fixture("dedupe-last.mjs") });
  assert.deepEqual(await pass(s.id, ids("a", "b", "c")), ["a", "b", "c"]);
  assert.deepEqual(await pass(s.id, ids("b", "c", "d", "e")), ["d", "e"]);
  assert.deepEqual(await pass(s.id, ids("d", "e")), [], "nothing after the last one");
  // No id matches the cached "e": all are emitted.
  assert.deepEqual(await pass(s.id, ids("x", "y")), ["x", "y"]);
  assert.deepEqual(await pass(s.id, ids("w", "x", "y", "z")), ["z"]);
});

test("last with ts: events are ordered by ts first, so the newest timestamp counts as last", async () => {
  const s = await deploy(server, { component_code: fixture("dedupe-last.mjs") });
  // Fetched newest first, as APIs list them.
  assert.deepEqual(
    await pass(s.id, [
      { id: "c", ts: 3000 },
      { id: "b", ts: 2000 },
      { id: "a", ts: 1000 },
    ]),
    ["a", "b", "c"],
  );
  assert.deepEqual(
    await pass(s.id, [
      { id: "e", ts: 5000 },
      { id: "d", ts: 4000 },
      { id: "c", ts: 3000 },
      { id: "b", ts: 2000 },
    ]),
    ["d", "e"],
  );
});

test("an emit without an id under dedupe is refused and reported on $errors; the others go through", async () => {
  for (const strategy of ["unique", "greatest", "last"]) {
    const s = await deploy(server, { component_code: fixture(`dedupe-${strategy}.mjs`) });
    assert.deepEqual(await pass(s.id, [{ id: 1 }, { v: "no id" }, { id: 2 }]), [1, 2], strategy);
    const errors = await events(server, s.id, "$errors");
    assert.equal(errors.length, 1, `${strategy}: one error`);
    assert.equal(errors[0].event.error.code, "dedupe_missing_id");
    assert.match(errors[0].event.error.message, new RegExp(strategy));
  }
});

test("greatest: a non-numeric id cannot be compared and is refused on $errors", async () => {
  const s = await deploy(server, { component_code: fixture("dedupe-greatest.mjs") });
  assert.deepEqual(await pass(s.id, ids(1, "abc", 2)), [1, 2]);
  const errors = await events(server, s.id, "$errors");
  assert.equal(errors.length, 1);
});

test("the dedupe cache survives an update of the source", async () => {
  const s = await deploy(server, { component_code: fixture("dedupe-unique.mjs") });
  assert.deepEqual(await pass(s.id, ids(1, 2)), [1, 2]);
  const put = await server.api("PUT", `/v1/sources/${s.id}`, {
    body: { component_code: fixture("dedupe-unique.mjs").replace('version: "1.0.0"', 'version: "1.0.1"') },
  });
  assert.equal(put.status, 200, put.text);
  assert.deepEqual(await pass(s.id, ids(2, 3)), [3]);
});
