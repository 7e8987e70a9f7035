/**
 * `GET /metrics` passes Prometheus's own linter, `promtool check metrics` (Debian's `prometheus` package;
 * .ci/run installs it): names, suffixes and help texts as Prometheus expects them. Skipped, saying so,
 * where promtool is not installed.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { after, before, test } from "node:test";
import { startServer, type TestServer } from "../helpers.ts";

const found = spawnSync("promtool", ["--version"], { stdio: "ignore" });
const skip = found.error ? "promtool is not installed (apt-get install prometheus)" : false;

let server: TestServer;
before(async () => {
  if (!skip) server = await startServer();
});
after(() => server?.close());

test("promtool check metrics finds nothing to report in /metrics", { skip }, async () => {
  // Series of the API's own counters and histograms, besides the process's.
  assert.equal((await server.api("GET", "/v1/users/me")).status, 200);
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const lint = spawnSync("promtool", ["check", "metrics"], { input: text, encoding: "utf8" });
  assert.equal(lint.status, 0, `promtool exited ${lint.status}: ${lint.stdout}${lint.stderr}`);
  assert.equal(`${lint.stdout}${lint.stderr}`.trim(), "");
  // The counts by type stay: their sum is what the dropped `_total` gauges held (docs/operations.md).
  for (const name of ["fount_nodejs_active_handles", "fount_nodejs_active_resources"]) {
    assert.match(text, new RegExp(`^${name}\\{`, "m"), `${name} is still there`);
  }
});
