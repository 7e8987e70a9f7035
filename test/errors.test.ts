import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { errorCatalogue } from "../src/errors.ts";

test("docs/errors.md lists exactly the error catalogue, with the same statuses", () => {
  const doc = readFileSync(new URL("../docs/errors.md", import.meta.url), "utf8");
  const rows = [...doc.matchAll(/^\| `([a-z_]+)` \| (\d{3}) \|/gm)].map((m) => [m[1], Number(m[2])]);
  const catalogue = Object.entries(errorCatalogue).map(([code, e]) => [code, e.status]);
  assert.deepEqual(rows, catalogue);
});
