import assert from "node:assert/strict";
import { test } from "node:test";
import { newSortableId } from "../src/ids.ts";

test("sortable IDs sort in the order of their times, whatever their random parts", () => {
  const times = [0, 1, 61, 62, 3843, 3844, Date.UTC(2026, 10, 23), Date.UTC(2026, 10, 23) + 1, 62 ** 8 - 1];
  const ids = times.map((ms) => newSortableId("del", ms));
  for (const id of ids) assert.match(id, /^del_[0-9A-Za-z]{20}$/);
  assert.deepEqual([...ids].sort(), ids);
  // Made in the same millisecond, two IDs share the time part and differ in the random one.
  const a = newSortableId("del", 5);
  const b = newSortableId("del", 5);
  assert.equal(a.slice(0, 12), b.slice(0, 12));
  assert.notEqual(a, b);
});
