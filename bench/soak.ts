/**
 * Soak: the fuzz stream of `test/http/fuzz-requests.ts` against one server for many rounds, printing the
 * server's RSS and heap (after a full GC) before, after each round, and after a pause at the end. Memory
 * that keeps growing round after round is a leak; a rise that levels off is caches filling to their bound.
 * Not part of `npm test` or `npm run bench` (it runs for minutes).
 *
 *   node bench/soak.ts [--rounds 10] [--requests 5000] [--concurrency 8] [--seed 1] [--snapshots /tmp/dir]
 *
 * With `--snapshots`, heap snapshots are written after the first and the last round, to compare in
 * Chrome DevTools (Memory → Comparison). FOUNT_* variables pass to the server (FOUNT_RATE_LIMIT=0 is the
 * default here, so that the fuzz stream reaches every route instead of 429s).
 */
import { parseArgs } from "node:util";
import { adminKey } from "../test/helpers.ts";
import { fuzzRequests, sendAll } from "../test/http/fuzz-requests.ts";
import type { Operation } from "../test/http/openapi-walk.ts";
import { HelperChild } from "./lib/processes.ts";

const { values: args } = parseArgs({
  options: {
    rounds: { type: "string", default: "10" },
    requests: { type: "string", default: "5000" },
    concurrency: { type: "string", default: "8" },
    seed: { type: "string", default: "1" },
    snapshots: { type: "string" },
  },
});
const rounds = Number(args.rounds);
const perRound = Number(args.requests);

process.env.FOUNT_RATE_LIMIT ??= "0";
const child = await HelperChild.start("soak-server.ts", [], 120_000);
const mb = (n: number) => (n / 1024 / 1024).toFixed(1);
const rows: string[] = [];
const print = (label: string, m: Record<string, number>, extra = "") => {
  const row = `${label.padEnd(12)} rss ${mb(m.rss!).padStart(6)} MB (anon ${mb(m.rssAnon!).padStart(6)}, file ${mb(m.rssFile!).padStart(5)}, lazily freed ${mb(m.lazyFree!).padStart(5)})  heap used/total ${mb(m.heapUsed!).padStart(5)}/${mb(m.heapTotal!).padStart(5)} MB  external ${mb(m.external!).padStart(5)} MB  ${m.executors} executors ${mb(m.executorsRss!)} MB ${extra}`;
  rows.push(row);
  console.log(row);
};
try {
  const setup = await child.call<{
    url: string;
    ops: Operation[];
    userKey: string;
    values: Record<string, Record<string, unknown>>;
    endpoints: string[];
    endpointBase: string;
  }>("setup", {}, 300_000);
  const ctx = {
    ops: setup.ops,
    userKey: setup.userKey,
    adminKey,
    values: new Map(Object.entries(setup.values)),
    endpoints: setup.endpoints,
    endpointBase: setup.endpointBase,
  };
  print("cold", await child.call("memory", {}, 60_000), "(fixtures created, no fuzz request yet)");
  // A first short round warms every route (schemas compiled, executors started) before the baseline.
  await sendAll(
    setup.url,
    fuzzRequests(ctx, Number(args.seed) + 1000, 1000),
    Number(args.concurrency),
    () => {},
  );
  const before = await child.call("memory", {}, 60_000);
  print("before", before);
  let sent = 0;
  let fivexx = 0;
  for (let round = 1; round <= rounds; round++) {
    const started = performance.now();
    sent += await sendAll(
      setup.url,
      fuzzRequests(ctx, Number(args.seed) + round, perRound),
      Number(args.concurrency),
      (_req, a) => {
        if (a.status >= 500 || a.status === 0) fivexx++;
      },
    );
    const seconds = (performance.now() - started) / 1000;
    print(
      `round ${round}`,
      await child.call("memory", {}, 60_000),
      `(${sent} requests, ${(perRound / seconds).toFixed(0)}/s)`,
    );
    if (args.snapshots && (round === 1 || round === rounds)) {
      const { file } = await child.call(
        "snapshot",
        { file: `${args.snapshots}/soak-round-${round}.heapsnapshot` },
        120_000,
      );
      console.log(`  heap snapshot: ${file}`);
    }
  }
  await new Promise((r) => setTimeout(r, 5000));
  const after = await child.call("memory", {}, 60_000);
  print("after pause", after);
  console.log(
    `\n${sent} requests, ${fivexx} answered 5xx or not at all; heapUsed ${mb(after.heapUsed - before.heapUsed)} MB and rss ${mb(after.rss - before.rss)} MB over the baseline`,
  );
  await child.call("stop", {}, 60_000).catch(() => undefined);
} finally {
  await child.stop();
}
