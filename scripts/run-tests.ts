/**
 * `npm run test:unit`: every test file (or the files named as arguments), four at a time, the longest
 * first. `node --test` sorts its files by path, so the long files under test/process, test/runtime and
 * test/storage started last and ran on alone at the end while the cores idled. Starting the longest
 * first (longest-processing-time scheduling) shortens that tail. The list below comes from a clean-clone
 * run's per-test durations (2026-11-28); a file missing from it runs after them, in path order.
 */
import { globSync } from "node:fs";
import { run } from "node:test";
import { spec } from "node:test/reporters";

const longestFirst = [
  "test/http/timers.test.ts",
  "test/http-postgres/timers.test.ts",
  "test/http/malformed.test.ts",
  "test/http-postgres/malformed.test.ts",
  "test/http/metrics.test.ts",
  "test/http/filtered-responses.test.ts",
  "test/cli/sources.test.ts",
  "test/http/fuzz.test.ts",
  "test/http-postgres/fuzz.test.ts",
  "test/cluster/cluster.test.ts",
  "test/console/api-reference.test.ts",
  "test/console/console-admin.test.ts",
  "test/cluster/lease-spread.test.ts",
  "test/process/start.test.ts",
  "test/runtime/executor-tenants.test.ts",
  "test/pipedream/postgresql.test.ts",
  "test/cluster/forwarding.test.ts",
  "test/cluster/forwarding-faults.test.ts",
  "test/crash/outbox-crash.test.ts",
  "test/crash/crash.test.ts",
  "test/cluster/admin-nodes.test.ts",
  "test/console/console.test.ts",
  "test/console/console-editor.test.ts",
];

const named = process.argv.slice(2);
const all = named.length > 0 ? named : globSync("test/**/*.test.ts").sort();
const files = [
  ...longestFirst.filter((f) => all.includes(f)),
  ...all.filter((f) => !longestFirst.includes(f)),
];

const stream = run({ files, concurrency: 4, timeout: 120_000 });
stream.on("test:fail", () => {
  process.exitCode = 1;
});
stream.compose(spec).pipe(process.stdout);
