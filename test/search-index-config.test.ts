import assert from "node:assert/strict";
import { test } from "node:test";
import { ConfigError, loadConfig } from "../src/config.ts";

test("FOUNT_SEARCH_INDEX_DELAY_MS sets how often SQLite's search index catches up: 1 s by default, 10 ms at least", () => {
  assert.equal(loadConfig({}).searchIndexDelayMs, 1000);
  assert.equal(loadConfig({ FOUNT_SEARCH_INDEX_DELAY_MS: "250" }).searchIndexDelayMs, 250);
  assert.throws(
    () => loadConfig({ FOUNT_SEARCH_INDEX_DELAY_MS: "5" }),
    (err: unknown) =>
      err instanceof ConfigError && /FOUNT_SEARCH_INDEX_DELAY_MS must be an integer ≥ 10/.test(err.message),
  );
});
