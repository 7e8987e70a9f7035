/**
 * The server of `bench/soak.ts`: a Fount app (the test harness's `startServer`: real SQLite store, real
 * executors) with fixtures for the fuzz stream, answering over IPC with its memory after a full GC and,
 * on request, a heap snapshot. Environment variables of the bench reach the app's config (FOUNT_RATE_LIMIT…).
 */
import { readdirSync, readFileSync } from "node:fs";
import { setFlagsFromString, writeHeapSnapshot } from "node:v8";
import { runInNewContext } from "node:vm";
import { deploy, fixture } from "../../test/fixtures/components/fixtures.ts";
import { startServer } from "../../test/helpers.ts";
import { ensureAll, makerContext, operations, ownValues, unique } from "../../test/http/openapi-walk.ts";
import { serve } from "./ipc.ts";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as (options?: { type: string; flavor?: string }) => void;

const env: NodeJS.ProcessEnv = {};
for (const [k, v] of Object.entries(process.env)) if (k.startsWith("FOUNT_")) env[k] = v;
const server = await startServer({}, env);

function memory(): Record<string, number> {
  // Twice: the first collection may leave garbage that finalizers released.
  gc();
  gc();
  // What V8 does when memory runs short: also hands pooled pages of its heap back to the OS.
  if (process.env.SOAK_LAST_RESORT_GC === "1") gc({ type: "major", flavor: "last-resort" });
  const m = process.memoryUsage();
  // RSS split into anonymous memory (heaps, malloc) and file-backed pages (code), and the pages freed
  // with MADV_FREE that the kernel has not taken back yet (they count in RSS until memory is short).
  const status = readFileSync("/proc/self/status", "utf8");
  const rollup = readFileSync("/proc/self/smaps_rollup", "utf8");
  const kb = (text: string, field: string) =>
    Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? 0) * 1024;
  // The executor processes this server started (one per owner with a running source).
  let executorsRss = 0;
  let executors = 0;
  for (const tid of readdirSync("/proc/self/task")) {
    for (const pid of readFileSync(`/proc/self/task/${tid}/children`, "utf8").split(" ").filter(Boolean)) {
      try {
        executorsRss += kb(readFileSync(`/proc/${pid}/status`, "utf8"), "VmRSS");
        executors++;
      } catch {
        // Gone meanwhile.
      }
    }
  }
  return {
    executors,
    executorsRss,
    rss: m.rss,
    rssAnon: kb(status, "RssAnon"),
    rssFile: kb(status, "RssFile"),
    lazyFree: kb(rollup, "LazyFree"),
    heapUsed: m.heapUsed,
    heapTotal: m.heapTotal,
    external: m.external,
  };
}

serve({
  ready: () => ({}),
  setup: async () => {
    const ops = await operations(server);
    const user = await server.createUser(unique("soaked"), "paid");
    const ctx = makerContext(server, ops, user);
    await ensureAll(ctx, ops);
    const values: Record<string, Record<string, unknown>> = {};
    for (const op of ops) {
      values[op.label] =
        (await ownValues(
          ctx,
          op,
          op.params.map((p) => p.name),
        ).catch(() => ownValues(ctx, op))) ?? {};
    }
    const hosting = await server.createUser(unique("hosting"), "paid");
    const endpoints: string[] = [];
    for (const file of ["http-echo.mjs", "responder.mjs"]) {
      const source = await deploy(server, { component_code: fixture(file) }, hosting.key);
      endpoints.push(new URL(source.configured_props.http.endpoint_url).pathname);
    }
    return { url: server.url, ops, userKey: user.key, values, endpoints, endpointBase: server.endpoints };
  },
  memory: () => memory(),
  snapshot: (m) => ({ file: writeHeapSnapshot(String(m.file)) }),
  stop: async () => {
    await server.close();
    setImmediate(() => process.exit(0));
    return {};
  },
});
