/**
 * What the outbox's writes cost per delivered event, without a server: this working tree's store driver
 * against another commit's, in one process, in alternating rounds. Each round commits `--commits`
 * transactions, each inserting `--group` deliveries (claimed at routing, as a webhook's are) and settling
 * the previous transaction's with their first attempt, as the full flow's group commits do; it prints the
 * main thread's CPU per delivery (and, on PostgreSQL, that of every `postgres` process), the median of the
 * rounds. `--setup-base` and `--setup-work` run SQL on each store first, to weigh a schema variant
 * (docs/architecture.md, "Delivery's SQL, statement by statement"):
 *
 *   node bench/outbox-commit.ts [--base HEAD] [--store sqlite|postgres] [--rounds 10] [--commits 300] [--group 12]
 *                               [--setup-work "DROP INDEX deliveries_finished"]
 */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { DatabaseSync } from "node:sqlite";
import { parseArgs } from "node:util";
import pg from "pg";
import type { Delivery, DeliveryAttempt } from "../src/domain/types.ts";
import type { DeliveryPatch, Storage } from "../src/storage/port.ts";
import { checkout } from "./lib/checkout.ts";
import { namedCpuSecondsSince, readProcStats } from "./lib/processes.ts";
import { createSchema, dropSchema, urlWithSchema } from "./parts/context.ts";

const { values } = parseArgs({
  options: {
    base: { type: "string", default: "HEAD" },
    store: { type: "string", default: "sqlite" },
    rounds: { type: "string", default: "10" },
    commits: { type: "string", default: "300" },
    group: { type: "string", default: "12" },
    "setup-base": { type: "string", default: "" },
    "setup-work": { type: "string", default: "" },
    "pg-url": {
      type: "string",
      default: process.env.FOUNT_BENCH_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test",
    },
  },
});
const group = Number(values.group);
const commits = Number(values.commits);
const onPostgres = values.store === "postgres";
const pgUrl = values["pg-url"];

/** One side of the comparison: its store, the deliveries it settles next, its rounds' figures. */
interface Side {
  name: string;
  store: Storage;
  cleanup: () => Promise<void>;
  pending: Delivery[];
  main: number[];
  postgres: number[];
}

async function open(root: string, name: string, setup: string): Promise<Side> {
  const side = { name, pending: [], main: [], postgres: [] };
  if (onPostgres) {
    const schema = await createSchema(pgUrl);
    const url = urlWithSchema(pgUrl, schema);
    const { openPostgresStorage } = await import(path.join(root, "src/storage/postgres/driver.ts"));
    const store: Storage = await openPostgresStorage({ url });
    if (setup) {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      await client.query(setup).finally(() => client.end());
    }
    return { ...side, store, cleanup: () => dropSchema(pgUrl, schema) };
  }
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-outbox-"));
  const { openSqliteStorage } = await import(path.join(root, "src/storage/sqlite/driver.ts"));
  const store: Storage = openSqliteStorage({ dataDir });
  if (setup) {
    const db = new DatabaseSync(path.join(dataDir, "fount.db"));
    db.exec(setup);
    db.close();
  }
  return { ...side, store, cleanup: async () => rmSync(dataDir, { recursive: true, force: true }) };
}

/** The `http` part's event as a delivery carries it: the request the emitter source got. */
const event = {
  method: "POST",
  path: "/",
  query: {},
  headers: { "content-type": "application/json", "content-length": "200", host: "127.0.0.1:8788" },
  body: { order: 1, customer: { id: "c_1", city: "Lyon" }, text: "x".repeat(120) },
};
let ms = Date.now();
let serial = 0;

function newDelivery(nowMs: number, i: number): Delivery {
  return {
    id: `del_${nowMs.toString(36)}${(serial++).toString(36).padStart(8, "0")}`,
    ownerId: "u_bench",
    subscriptionId: "sub_bench",
    emitterId: "dc_bench",
    eventId: `${nowMs}-${i}`,
    channel: "",
    listenerId: "wh_bench",
    listenerKind: "webhook",
    event,
    meta: { emit_id: `e${i}`, id: `${nowMs}-${i}`, ts: nowMs, emitter_id: "dc_bench", name: "" },
    indexedAtMs: nowMs,
    hops: 1,
    status: "pending",
    attempts: 0,
    roundAttempts: 0,
    nextAttemptMs: nowMs,
    lastStatusCode: null,
    lastError: null,
    lastDurationMs: null,
    claimedBy: "bench-node",
    claimedUntilMs: nowMs + 45_000,
    createdMs: nowMs,
    updatedMs: nowMs,
  };
}

const succeeded = (nowMs: number): DeliveryPatch => ({
  status: "succeeded",
  attempts: 1,
  roundAttempts: 1,
  nextAttemptMs: null,
  lastStatusCode: 200,
  lastError: null,
  lastDurationMs: 2,
  updatedMs: nowMs,
});

/** The first attempt as `HttpSender` records a receiver's `ok`. */
const firstAttempt = (id: string, nowMs: number): DeliveryAttempt => ({
  deliveryId: id,
  n: 1,
  startedMs: nowMs - 2,
  durationMs: 2,
  statusCode: 200,
  error: null,
  response: "ok",
  outcome: "succeeded",
  detail: {
    url: "http://127.0.0.1:4000/hook",
    requestHeaders: {
      "webhook-timestamp": String(Math.floor(nowMs / 1000)),
      "webhook-signature": "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=",
    },
    responseHeaders: {
      "content-type": "text/plain",
      date: new Date(nowMs).toUTCString(),
      "keep-alive": "timeout=5",
    },
    responseTruncated: false,
    errorKind: null,
  },
});

async function commit(side: Side): Promise<void> {
  ms += 2;
  const fresh = Array.from({ length: group }, (_, i) => newDelivery(ms, i));
  const settling = side.pending;
  await side.store.transaction(async (tx) => {
    await tx.insertDeliveries(fresh);
    for (const d of settling) await tx.settleDelivery(d.id, succeeded(ms), firstAttempt(d.id, ms));
  });
  side.pending = fresh;
}

async function round(side: Side): Promise<void> {
  const procs = onPostgres ? readProcStats() : undefined;
  const from = process.threadCpuUsage();
  for (let c = 0; c < commits; c++) await commit(side);
  const used = process.threadCpuUsage(from);
  side.main.push((used.user + used.system) / (commits * group));
  if (procs) side.postgres.push((namedCpuSecondsSince("postgres", procs) * 1e6) / (commits * group));
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;
const base = checkout(values.base);
const sides: Side[] = [];
try {
  sides.push(await open(base.root, `base ${base.commit}`, values["setup-base"]));
  sides.push(await open(path.join(import.meta.dirname, ".."), "working tree", values["setup-work"]));
  for (const side of sides) for (let c = 0; c < 100; c++) await commit(side);
  const rounds = Number(values.rounds);
  for (let r = 0; r < rounds; r++)
    for (const side of r % 2 === 0 ? sides : [...sides].reverse()) await round(side);
  for (const side of sides) {
    const pgPart = onPostgres ? `, postgres ${median(side.postgres).toFixed(1)} µs` : "";
    console.log(
      `${side.name.padEnd(16)} main thread ${median(side.main).toFixed(1)} µs per delivery${pgPart}  rounds ${side.main.map((x) => x.toFixed(1)).join(" ")}`,
    );
  }
  const [a, b] = sides as [Side, Side];
  const pgRatio = onPostgres ? `, postgres ${(median(b.postgres) / median(a.postgres)).toFixed(3)}` : "";
  console.log(`working tree / base: main thread ${(median(b.main) / median(a.main)).toFixed(3)}${pgRatio}`);
} finally {
  for (const side of sides) {
    await side.store.close();
    await side.cleanup();
  }
  base.remove();
}
