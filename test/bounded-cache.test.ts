/**
 * The byte-bounded LRU cache (src/bounded-cache.ts) that bounds the caches of saved components and of
 * source rows: it lets the least recently used values go once their estimated bytes pass the bound.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { ByteBoundedCache, estimatedBytes } from "../src/bounded-cache.ts";

const sized = (maxBytes: number, maxEntries?: number) =>
  new ByteBoundedCache<string, string>({ maxBytes, maxEntries, sizeOf: (v) => v.length });

test("a byte-bounded cache lets the least recently used values go once past its bytes", () => {
  const cache = sized(10);
  cache.set("a", "xxxx");
  cache.set("b", "xxxx");
  assert.equal(cache.bytes, 8);
  assert.equal(cache.get("a"), "xxxx"); // now "b" is the least recently used
  cache.set("c", "xxxx");
  assert.equal(cache.get("b"), undefined);
  assert.equal(cache.get("a"), "xxxx");
  assert.equal(cache.get("c"), "xxxx");
  assert.equal(cache.bytes, 8);
  assert.equal(cache.size, 2);
});

test("a byte-bounded cache keeps no value larger than its bound, and counts a replaced value once", () => {
  const cache = sized(10);
  cache.set("a", "xxxx");
  cache.set("big", "x".repeat(11));
  assert.equal(cache.get("big"), undefined);
  assert.equal(cache.get("a"), "xxxx");
  cache.set("a", "xxxxxx");
  assert.equal(cache.bytes, 6);
  cache.delete("a");
  assert.equal(cache.bytes, 0);
  cache.set("b", "xx");
  cache.clear();
  assert.equal(cache.bytes, 0);
  assert.equal(cache.get("b"), undefined);
});

test("a byte-bounded cache also holds at most its count of entries", () => {
  const cache = sized(1000, 3);
  for (const key of ["a", "b", "c", "d"]) cache.set(key, "x");
  assert.equal(cache.size, 3);
  assert.equal(cache.get("a"), undefined);
  assert.equal(cache.get("d"), "x");
});

test("a row's estimated size grows with its JSON", () => {
  const small = estimatedBytes({ props: {} });
  const large = estimatedBytes({ props: { p: "y".repeat(1024 * 1024) } });
  assert.ok(large - small >= 1024 * 1024);
});
