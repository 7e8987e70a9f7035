/**
 * `fount deploy <file>` of a multi-file component that brings its package.json: a package imported
 * without a version gets a version satisfying the package.json's range, not the newest major.
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { adminKey, startServer, type TestServer } from "../helpers.ts";
import { fount } from "./run.ts";

let server: TestServer;
let dir: string;

before(async () => {
  server = await startServer();
  dir = mkdtempSync(path.join(os.tmpdir(), "fount-ranges-"));
  // Pipedream's layout: the app's package.json at the top, sources two folders down.
  writeFileSync(
    path.join(dir, "package.json"),
    JSON.stringify({ name: "@acme/components", dependencies: { "is-number": "^6.0.0", ms: "~2.0.0" } }),
  );
  writeFileSync(
    path.join(dir, "acme.app.mjs"),
    `import ms from "ms";\nexport default { type: "app", app: "acme", methods: { wait() { return ms("2s"); } } };\n`,
  );
  mkdirSync(path.join(dir, "sources", "new-thing"), { recursive: true });
  writeFileSync(
    path.join(dir, "sources", "new-thing", "new-thing.mjs"),
    `import isNumber from "is-number";
import escape from "escape-string-regexp@5.0.0";
import acme from "../../acme.app.mjs";
export default {
  key: "acme-new-thing",
  name: "New Thing",
  version: "0.1.0",
  props: { db: "$.service.db" },
  async run(event) {
    this.$emit({ numeric: isNumber(event.n), wait: acme.methods.wait(), escaped: escape("a.b") });
  },
};
`,
  );
});
after(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

test("imports without a version get versions satisfying the component's package.json", async () => {
  const env = { FOUNT_URL: server.url, FOUNT_API_KEY: adminKey, HOME: dir };
  const res = await fount(
    ["deploy", path.join(dir, "sources", "new-thing", "new-thing.mjs"), "--json"],
    env,
    120_000,
  );
  assert.equal(res.code, 0, res.stderr);
  const source = JSON.parse(res.stdout);
  const component = await server.api("GET", `/v1/components/${source.component_id}`);
  assert.equal(component.status, 200, component.text);
  const deps = component.body.data.dependencies;
  assert.match(deps["is-number"], /^6\./, "^6.0.0, not the newest major (7)");
  assert.match(deps.ms, /^2\.0\./, "~2.0.0 from the app file's import too");
  assert.equal(deps["escape-string-regexp"], "5.0.0", "a version in the import itself is kept");

  const run = await server.api("POST", `/v1/sources/${source.id}/run`, { body: { event: { n: "5" } } });
  assert.equal(run.status, 200, run.text);
  assert.deepEqual(run.body.data.emits[0].event, { numeric: true, wait: 2000, escaped: "a\\.b" });
});
