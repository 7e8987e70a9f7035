/**
 * A tenant's first hit after its executor stopped idle (issue 29, point 5), on two servers measured in
 * turn: each server gets the same number of tenants (a user with one HTTP source each) and
 * FOUNT_EXECUTOR_IDLE_S=3; once every owner's executor stopped on both, each tenant is hit once on one
 * server, then on the other (the order alternating), 200 ms apart, so the machine's drift falls on both
 * alike. Prints p50, p95 and the mean of each, with the load average.
 *
 *   node bench/compare-first-hit.ts [--base <ref>] [--env-a K=V,…] [--env-b K=V,…] [--tenants 10] [--rounds 2]
 *
 * A is the `--base` commit (in a temporary worktree; this working tree when absent), B this working tree;
 * `--env-a`/`--env-b` add environment variables to one of them (`--env-a FOUNT_EXECUTOR_SPARES=0`
 * compares spares off and on in one build).
 */
import os from "node:os";
import { parseArgs } from "node:util";
import { type Checkout, checkout } from "./lib/checkout.ts";
import { httpCall } from "./lib/http-client.ts";
import { FountProcess, sleep } from "./lib/processes.ts";
import { percentile } from "./lib/stats.ts";
import { payload } from "./parts/context.ts";
import { executorPids, IDLE_S, type Tenant, tenants } from "./parts/tenants.ts";

const { values } = parseArgs({
  options: {
    base: { type: "string" },
    "env-a": { type: "string", default: "" },
    "env-b": { type: "string", default: "" },
    tenants: { type: "string", default: "10" },
    rounds: { type: "string", default: "2" },
  },
});

function envOf(spec: string): Record<string, string> {
  return Object.fromEntries(
    spec
      .split(",")
      .filter(Boolean)
      .map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]),
  );
}

const load = () => os.loadavg()[0]!.toFixed(1);
const log = (m: string) => console.log(`[first-hit] ${m}`);
const base: Checkout | undefined = values.base ? checkout(values.base) : undefined;
const servers: FountProcess[] = [];
try {
  for (const [root, spec] of [
    [base?.root, values["env-a"]],
    [undefined, values["env-b"]],
  ] as const) {
    servers.push(
      await FountProcess.start({
        ...(root ? { root } : {}),
        env: { FOUNT_EXECUTOR_IDLE_S: String(IDLE_S), ...envOf(spec) },
      }),
    );
  }
  const lists: Tenant[][] = [];
  for (const fount of servers) lists.push(await tenants(fount, Number(values.tenants), log));
  const ms: number[][] = servers.map(() => []);
  for (let round = 0; round < Number(values.rounds); round++) {
    const deadline = Date.now() + 120_000;
    while (servers.some((s) => executorPids(s.pid).length > 0) && Date.now() < deadline) await sleep(250);
    log(`round ${round + 1}: executors stopped; load ${load()}`);
    for (let i = 0; i < lists[0]!.length; i++) {
      const order = i % 2 === 0 ? [0, 1] : [1, 0];
      for (const s of order) {
        const t0 = performance.now();
        const res = await httpCall(lists[s]![i]!.endpointUrl, {
          method: "POST",
          json: payload,
          timeoutMs: 60_000,
        });
        if (res.status !== 200)
          throw new Error(`first hit answered ${res.status}: ${res.text.slice(0, 200)}`);
        ms[s]!.push(performance.now() - t0);
        await sleep(200);
      }
    }
  }
  const names = [
    `A ${base ? base.commit : "working tree"} ${values["env-a"]}`,
    `B working tree ${values["env-b"]}`,
  ];
  for (let s = 0; s < servers.length; s++) {
    const sorted = Float64Array.from(ms[s]!).sort();
    const mean = sorted.reduce((a, b) => a + b, 0) / sorted.length;
    console.log(
      `${names[s]}: first hit p50 ${percentile(sorted, 50).toFixed(1)} ms, p95 ${percentile(sorted, 95).toFixed(1)} ms, mean ${mean.toFixed(1)} ms (${sorted.length} hits)`,
    );
  }
  console.log(
    `load average at the end: ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(" ")}`,
  );
} finally {
  for (const s of servers) await s.stop().catch(() => {});
  base?.remove();
}
