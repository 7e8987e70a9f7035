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
// Each file's time, summed over its top-level tests, printed last for the slowest: what to shorten,
// and what to move up `longestFirst`, when the suite nears its bound (15 minutes on a 2-core machine).
const fileMs = new Map<string, number>();
const count = (data: { nesting: number; file?: string; details: { duration_ms: number } }) => {
  if (data.nesting === 0 && data.file !== undefined)
    fileMs.set(data.file, (fileMs.get(data.file) ?? 0) + data.details.duration_ms);
};
stream.on("test:pass", count);
stream.on("test:fail", (data) => {
  process.exitCode = 1;
  count(data);
});
const started = performance.now();
const reported = stream.compose(spec);
reported.pipe(process.stdout, { end: false });
reported.on("end", () => {
  const slowest = [...fileMs].sort((a, b) => b[1] - a[1]).slice(0, 15);
  const root = `${process.cwd()}/`;
  const lines = slowest.map(([f, ms]) => `  ${(ms / 1000).toFixed(1).padStart(6)} s  ${f.replace(root, "")}`);
  const wall = ((performance.now() - started) / 1000).toFixed(0);
  process.stdout.write(
    `\nwall ${wall} s; the slowest files (their top-level tests' time):\n${lines.join("\n")}\n`,
  );
});
