/**
 * What a group commit of the `http` part costs PostgreSQL, without a server: the driver on a fresh schema
 * commits `--commits` transactions of `--events` events each into one window of `--keep` (100 by
 * default; a larger one appends, as a source with a longer retention does) (each with the
 * emitter's clock and the owner's usage, as a commit of the emitter source writes them), the search
 * indexer's statement every `--index-every` commits (a second at the bench's rate), and prints the CPU
 * of every `postgres` process per event and per commit, with the commits' wall-time percentiles.
 * `--setup` runs SQL on the fresh schema first, to weigh a variant of it against the migrations' own
 * (docs/architecture.md, "PostgreSQL's own CPU per hit"):
 *
 * `--varied` gives each event an order ID, a customer and an amount of its own.
 *
 *   node bench/pg-commit.ts [--varied] [--events 50] [--commits 600] [--keep 100] [--index-every 60] [--setup "DROP INDEX events_text"]
 */
import { parseArgs } from "node:util";
import pg from "pg";
import { openPostgresStorage } from "../src/storage/postgres/driver.ts";
import { namedCpuSecondsSince, readProcStats } from "./lib/processes.ts";
import { distribution } from "./lib/stats.ts";
import { createSchema, dropSchema, payload, urlWithSchema } from "./parts/context.ts";

const { values } = parseArgs({
  options: {
    events: { type: "string", default: "50" },
    commits: { type: "string", default: "600" },
    warmup: { type: "string", default: "40" },
    keep: { type: "string", default: "100" },
    "index-every": { type: "string", default: "60" },
    setup: { type: "string", default: "" },
    varied: { type: "boolean", default: false },
    "pg-url": {
      type: "string",
      default: process.env.FOUNT_BENCH_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test",
    },
  },
});
const perCommit = Number(values.events);
const commits = Number(values.commits);
const warmup = Number(values.warmup);
const indexEvery = Number(values["index-every"]);
const keep = Number(values.keep);
const pgUrl = values["pg-url"];
const varied = values.varied;

/**
 * The n-th event with `--varied`: the payload with an order ID, a customer and an amount of its own, as
 * a real source's events differ, rather than the same event each time (which flatters any scheme that
 * stores once what events share, as the blocks of docs/architecture.md's "Fewer index entries" did).
 */
function variedPayload(n: number): Record<string, unknown> {
  const customer = `cus_${(n * 7_919) % 1_000_003}`;
  return {
    ...payload,
    id: `ord_${String(n).padStart(12, "0")}`,
    amount: (n * 104_729) % 100_000,
    customer: { id: customer, email: `${customer}@example.com`, name: `Customer ${n % 997}` },
  };
}

const schema = await createSchema(pgUrl);
const store = await openPostgresStorage({ url: urlWithSchema(pgUrl, schema) });
try {
  if (values.setup) {
    const client = new pg.Client({ connectionString: urlWithSchema(pgUrl, schema) });
    await client.connect();
    await client.query(values.setup).finally(() => client.end());
  }
  const emitterId = "dc_pgcommit";
  let ms = Date.now();
  const times: number[] = [];
  let start = readProcStats();
  for (let c = 0; c < warmup + commits; c++) {
    if (c === warmup) start = readProcStats();
    ms += 3;
    const began = performance.now();
    await store.transaction(async (tx) => {
      for (let seq = 0; seq < perCommit; seq++) {
        await tx.insertEvent(
          {
            emitterId,
            channel: "",
            id: `${ms}-${seq}`,
            idMs: ms,
            idSeq: seq,
            indexedAtMs: ms,
            event: varied ? variedPayload(c * perCommit + seq) : payload,
            meta: { emit_id: `e${c}-${seq}`, name: "", emitter_id: emitterId },
          },
          keep,
        );
        await tx.putEmitterClock(emitterId, ms, seq);
      }
      await tx.addUsage("u_pgcommit", "2026-11-27", {
        invocations: perCommit,
        computeMs: perCommit,
        storedBytes: 0,
      });
    });
    if (c >= warmup) times.push(performance.now() - began);
    if (indexEvery > 0 && c % indexEvery === indexEvery - 1)
      await store.indexEventsForSearch?.(ms + 1, 1_000_000);
  }
  const cpuS = namedCpuSecondsSince("postgres", start);
  const wall = distribution(times);
  console.log(
    `${perCommit} events a commit, ${commits} commits: PostgreSQL CPU ${((1e6 * cpuS) / (commits * perCommit)).toFixed(1)} µs per event, ` +
      `${((1e3 * cpuS) / commits).toFixed(2)} ms per commit; commit p50 ${wall.p50.toFixed(2)} ms, p90 ${wall.p90.toFixed(2)} ms, max ${wall.max.toFixed(2)} ms`,
  );
} finally {
  await store.close();
  await dropSchema(pgUrl, schema);
}
