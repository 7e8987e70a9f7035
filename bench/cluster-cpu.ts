/**
 * Where a cluster's CPU goes, per hit: `--nodes` Fount servers on one fresh PostgreSQL schema (as the
 * bench's cluster part starts them), `--sources` emitter sources with each source's hits through one
 * node (routed by path), `--connections` (50) split over the nodes at a fixed total `--rate` (0: as fast
 * as answered). Prints the CPU of the nodes' main processes, of their executor processes, of every
 * PostgreSQL process on the machine and of this bench, each divided by the hits acknowledged, with the
 * transactions committed, the context switches of the nodes and executors per hit, and the messages
 * sent on the cluster channel during the run.
 *
 *   node bench/cluster-cpu.ts [--nodes 3] [--sources 30] [--rate 3000] [--duration 6] [--connections 50]
 *                             [--cpu-prof DIR] [--every-node] [--node-args="<flags>"] [--body-bytes N]
 *
 * `--every-node` sends every source's hits through every node instead (they are forwarded to the node
 * that runs each source). `--node-args` go to each node's server process (a Node or V8 flag to try).
 * `--body-bytes` pads the ~200-byte JSON body to about that many bytes (what forwarding a large hit costs).
 *
 * Run `--nodes 1` and `--nodes 3` one after the other: at the same rate, what three nodes add per hit
 * shows thread by thread. PostgreSQL is counted whole, so run it on an otherwise idle database server.
 */
import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import pg from "pg";
import { schemaChannel } from "../src/storage/postgres/cluster.ts";
import { runLoad } from "./lib/load.ts";
import {
  childPids,
  FountProcess,
  namedCpuSeconds,
  ownCpuSeconds,
  sleep,
  treeCpuSeconds,
} from "./lib/processes.ts";
import {
  createSchema,
  dropSchema,
  emitterCode,
  payload,
  payloadText,
  urlWithSchema,
} from "./parts/context.ts";

const { values } = parseArgs({
  options: {
    nodes: { type: "string", default: "3" },
    sources: { type: "string", default: "30" },
    rate: { type: "string", default: "3000" },
    duration: { type: "string", default: "6" },
    "cpu-prof": { type: "string" },
    "every-node": { type: "boolean", default: false },
    "node-args": { type: "string", default: "" },
    connections: { type: "string", default: "50" },
    "body-bytes": { type: "string", default: "0" },
    "pg-url": {
      type: "string",
      default: process.env.FOUNT_BENCH_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test",
    },
  },
});
const nodes = Number(values.nodes);
const sourceCount = Number(values.sources);
const rate = Number(values.rate);
const durationS = Number(values.duration);
const pgUrl = values["pg-url"];
const connections = Number(values.connections);
const padBytes = Number(values["body-bytes"]) - payloadText.length;
const body = padBytes > 20 ? JSON.stringify({ ...payload, pad: "x".repeat(padBytes - 10) }) : payloadText;
/** Past the 15 s in which a new node sends every event on the cluster channel (docs/architecture.md). */
const settleMs = 16_000;
/** Context switches, voluntary or not, of every thread of `pid`. */
function switches(pid: number): number {
  let n = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const status = readFileSync(`/proc/${pid}/task/${tid}/status`, "utf8");
      for (const m of status.matchAll(/ctxt_switches:\s+(\d+)/g)) n += Number(m[1]);
    } catch {
      // The thread ended while listing.
    }
  }
  return n;
}

const schema = await createSchema(pgUrl);
const shared = {
  DATABASE_URL: urlWithSchema(pgUrl, schema),
  FOUNT_ENCRYPTION_KEY: randomBytes(32).toString("base64"),
};
const nodeArgs = [
  ...values["node-args"].split(" ").filter(Boolean),
  ...(values["cpu-prof"] ? ["--cpu-prof", `--cpu-prof-dir=${values["cpu-prof"]}`] : []),
];
const servers: FountProcess[] = [];
const watcher = new pg.Client({ connectionString: pgUrl });
try {
  // The first node creates the schema and the admin before the others join.
  servers.push(await FountProcess.start({ env: { ...shared, FOUNT_NODE_ID: "cpu-n1" }, nodeArgs }));
  servers.push(
    ...(await Promise.all(
      Array.from({ length: nodes - 1 }, (_, i) =>
        FountProcess.start({ env: { ...shared, FOUNT_NODE_ID: `cpu-n${i + 2}` }, nodeArgs }),
      ),
    )),
  );
  const paths: string[] = [];
  for (let i = 0; i < sourceCount; i++) {
    const source = await servers[0]!.deploy(emitterCode(`cpu-${i}`, false), `cpu-${i}`);
    const url = new URL(source.endpointUrl);
    paths.push(url.pathname + url.search);
  }
  const load = (seconds: number, total?: number) =>
    Promise.all(
      servers.map((server, i) =>
        runLoad({
          url: server.endpoints,
          paths: values["every-node"] ? paths : paths.filter((_, j) => j % nodes === i),
          body,
          connections: Math.floor(connections / nodes) + (i < connections % nodes ? 1 : 0),
          durationS: seconds,
          ...(total ? { overallRate: Math.round(total / nodes) } : {}),
        }),
      ),
    );
  await sleep(settleMs);
  await load(3, rate > 0 ? rate : undefined);

  await watcher.connect();
  let messages = 0;
  watcher.on("notification", () => messages++);
  // The nodes' channel (src/domain/cluster/cluster-link.ts), named after the schema as the store names it.
  await watcher.query(`LISTEN "${schemaChannel("fount_cluster", schema)}"`);
  const transactions = async () =>
    Number(
      (await watcher.query("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"))
        .rows[0].xact_commit,
    );
  const sample = async () => ({
    main: servers.reduce((a, s) => a + ownCpuSeconds(s.pid), 0),
    executors: servers.reduce((a, s) => a + childPids(s.pid).reduce((b, p) => b + treeCpuSeconds(p), 0), 0),
    postgres: namedCpuSeconds("postgres"),
    bench: ownCpuSeconds(process.pid),
    switches: servers.reduce(
      (a, s) => a + switches(s.pid) + childPids(s.pid).reduce((b, p) => b + switches(p), 0),
      0,
    ),
    transactions: await transactions(),
  });
  const before = await sample();
  const results = await load(durationS, rate > 0 ? rate : undefined);
  const after = await sample();
  const hits = results.reduce((a, r) => a + r.ok, 0);
  const perHit = (key: "main" | "executors" | "postgres" | "bench") =>
    `${((1e6 * (after[key] - before[key])) / hits).toFixed(0)} µs/hit`;
  console.log(
    `${nodes} node(s), ${sourceCount} sources, ${rate > 0 ? `offered ${rate}/s` : "as fast as answered"}: ` +
      `${hits} hits acknowledged, ${Math.round(hits / durationS)}/s, p99 per node ${results.map((r) => r.latencyMs.p99).join(" / ")} ms`,
  );
  console.log(`node main processes  ${perHit("main")}`);
  console.log(`executor processes   ${perHit("executors")}`);
  console.log(`PostgreSQL           ${perHit("postgres")}`);
  console.log(`bench (load)         ${perHit("bench")}`);
  console.log(
    `transactions ${after.transactions - before.transactions} (${(hits / (after.transactions - before.transactions)).toFixed(1)} hits each), ` +
      `context switches ${((after.switches - before.switches) / hits).toFixed(2)} per hit, cluster channel messages ${messages}`,
  );
} finally {
  await watcher.end().catch(() => undefined);
  await Promise.all(servers.map((s) => s.stop()));
  await dropSchema(pgUrl, schema);
}
