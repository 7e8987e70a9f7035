/**
 * `npm run bench` on both stores: the parts issue 29 asks of both drivers (`eachStore`) run once per
 * store, named with it, the others once on the first store; `--store` narrows the run to one store
 * and refuses any other name before starting a server.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { test } from "node:test";
import { benchStores, partRuns } from "../../bench/lib/stores.ts";

const pgUrl = "postgres://postgres@127.0.0.1:5432/test";
const parts = { http: { eachStore: true }, manual: {}, webhooks: { eachStore: true }, cluster: {} };

test("by default, each eachStore part runs on SQLite then PostgreSQL, named with the store, the others once on SQLite", () => {
  const runs = partRuns(parts, ["http", "manual", "webhooks", "cluster"], benchStores("both", pgUrl)!);
  assert.deepEqual(
    runs.map((r) => [r.name, r.store.driver, r.label]),
    [
      ["http", "sqlite", "SQLite"],
      ["http", "postgres", "PostgreSQL"],
      ["manual", "sqlite", undefined],
      ["webhooks", "sqlite", "SQLite"],
      ["webhooks", "postgres", "PostgreSQL"],
      ["cluster", "sqlite", undefined],
    ],
  );
  assert.deepEqual(runs[1]!.store, { driver: "postgres", url: pgUrl });
});

test("--store sqlite or postgres runs every part once on that store, without naming it", () => {
  for (const driver of ["sqlite", "postgres"] as const) {
    const runs = partRuns(parts, ["manual", "http"], benchStores(driver, pgUrl)!);
    assert.deepEqual(
      runs.map((r) => [r.name, r.store.driver, r.label]),
      [
        ["manual", driver, undefined],
        ["http", driver, undefined],
      ],
    );
  }
});

test("an unknown --store is refused with exit 2 and the names it takes", () => {
  assert.equal(benchStores("mysql", pgUrl), undefined);
  assert.equal(benchStores("toString", pgUrl), undefined);
  const run = spawnSync(process.execPath, ["bench/run.ts", "--store", "mysql", "--only", "http"], {
    encoding: "utf8",
    timeout: 60_000,
  });
  assert.equal(run.status, 2);
  assert.match(run.stderr, /--store must be sqlite, postgres or both, got mysql/);
});
