/**
 * The drivers' row caches hold a bounded number of bytes, not only of rows: a source's configured props
 * may hold about 1 MiB, and 10,000 such rows would take 10 GiB of heap. Past the bound the least recently
 * read rows are let go, and read from the store again when next needed.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import type { SourceRecord } from "../../src/domain/types.ts";
import { maxCachedBytes, RowCache } from "../../src/storage/postgres/row-cache.ts";
import { maxCachedSourceBytes, RowCache as SqliteRowCache } from "../../src/storage/sqlite/row-cache.ts";

const mib = 1024 * 1024;

function fatSource(i: number): SourceRecord {
  return {
    id: `dc_${i}`,
    ownerId: "u_1",
    createdBy: "u_1",
    componentId: "sc_1",
    name: `s${i}`,
    nameSlug: `s${i}`,
    active: true,
    props: { pad: `${i}-${"y".repeat(mib)}` },
    endpointId: `e${i}`,
    createdAt: 1,
    updatedAt: 1,
  };
}

test("the PostgreSQL row cache lets the least recently read large rows go past its bytes", async () => {
  const cache = new RowCache({ ttlMs: 60_000 });
  const rows = Math.ceil(maxCachedBytes / mib) + 8;
  const reads = new Map<number, number>();
  const read = (i: number) =>
    cache.read("sources", `endpoint\0e${i}`, async () => {
      reads.set(i, (reads.get(i) ?? 0) + 1);
      return fatSource(i);
    });
  for (let i = 0; i < rows; i++) await read(i);
  // The newest row is still cached; the oldest was let go and is read again.
  await read(rows - 1);
  assert.equal(reads.get(rows - 1), 1);
  await read(0);
  assert.equal(reads.get(0), 2);
});

test("the SQLite source caches hold at most their bytes of rows", () => {
  const cache = new SqliteRowCache();
  const rows = Math.ceil(maxCachedSourceBytes / mib) + 8;
  for (let i = 0; i < rows; i++) {
    cache.sourcesByEndpoint.set(`e${i}`, fatSource(i));
    cache.sourcesById.set(`dc_${i}`, fatSource(i));
  }
  for (const c of [cache.sourcesByEndpoint, cache.sourcesById]) {
    assert.ok(c.bytes <= maxCachedSourceBytes);
    assert.ok(c.size < rows);
  }
  assert.equal(cache.sourcesByEndpoint.get("e0"), undefined);
  assert.equal(cache.sourcesByEndpoint.get(`e${rows - 1}`)?.id, `dc_${rows - 1}`);
});
