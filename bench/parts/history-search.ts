/**
 * Event search latency (issue 28): N stored events (FOUNT_BENCH_SEARCH_EVENTS, default the issue's
 * 1,000,000) over five sources of one account, half of them in the searched source, written straight
 * into a fresh store (the part runs on each store of the run) (through HTTP, a million events would take the part an hour); then
 * searches through the API: a rare text (one event's order ID) and a common one (a city, 2.5 % of
 * events) within the source, a JSON path, and the rare and common texts across the account's sources.
 * Prints p50 and p95 of each, the store's plan for a text search, and the search indexes' size.
 * Last, the worst search there is (a word every event of the source holds, every match counted) runs
 * back to back while another source takes a steady 200 hits/s: that source's p99 shows whether a
 * search holds up the server (issue 28's ingest target, 25 ms, as while pruning).
 */

import path from "node:path";
import { DatabaseSync } from "node:sqlite";
import pg from "pg";
import type { Storage } from "../../src/storage/port.ts";
import { openPostgresStorage } from "../../src/storage/postgres/driver.ts";
import { openSqliteStorage } from "../../src/storage/sqlite/driver.ts";
import { runLoad } from "../lib/load.ts";
import type { FountProcess } from "../lib/processes.ts";
import { type Figure, figure } from "../lib/report.ts";
import { distribution } from "../lib/stats.ts";
import { type BenchStore, emitterCode, type PartContext, payloadText } from "./context.ts";

const part = "History search";
/** The size: 1,000,000 stored events. A smaller FOUNT_BENCH_SEARCH_EVENTS makes a quick run. */
const defaultEvents = 1_000_000;
/** Timed requests per query (after a few untimed ones). */
const samples = 40;
const cities = Array.from({ length: 40 }, (_, i) => `City${String.fromCharCode(65 + (i % 26))}${i}town`);
const words =
  "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec romeo sierra tango".split(
    " ",
  );
/** Hits a second offered to another source while the worst search runs, and for how long. */
const steadyRate = 200;
const searchingS = 10;
/** Rows written per statement. */
const batch = 5_000;

/** The n-th event's body: an order with an ID only it has, a customer shared by 1 in 5,000, a city by 1 in 40. */
function body(n: number): Record<string, unknown> {
  return {
    type: "order.created",
    id: orderId(n),
    amount: (n * 7919) % 100_000,
    customer: { id: `cus_${n % 5_000}`, email: `user${n % 5_000}@example.com` },
    city: cities[n % cities.length],
    note: `${words[n % words.length]} ${words[(n * 31) % words.length]} ${words[(n * 17) % words.length]}`,
  };
}
const orderId = (n: number) => `ord_${String(n).padStart(9, "0")}`;

interface Row {
  emitterId: string;
  ms: number;
  json: string;
  meta: string;
}

function* rows(sources: string[], total: number, startMs: number): Generator<Row[]> {
  // Half the events in the searched source (the first), the rest spread over the other four.
  let out: Row[] = [];
  for (let n = 0; n < total; n++) {
    const emitterId = n % 2 === 0 ? sources[0]! : sources[1 + (n % (sources.length - 1))]!;
    out.push({
      emitterId,
      ms: startMs + n,
      json: JSON.stringify(body(n)),
      meta: JSON.stringify({ emit_id: `e${n}`, name: "", emitter_id: emitterId }),
    });
    if (out.length === batch) {
      yield out;
      out = [];
    }
  }
  if (out.length > 0) yield out;
}

async function fillSqlite(file: string, sources: string[], total: number, startMs: number): Promise<void> {
  const db = new DatabaseSync(file);
  db.exec("PRAGMA busy_timeout = 10000");
  const insert = db.prepare(
    `INSERT INTO events (emitter_id, channel, id, id_ms, id_seq, indexed_at_ms, event_json, meta_json)
     VALUES (?, '', ?, ?, 0, ?, ?, ?)`,
  );
  for (const chunk of rows(sources, total, startMs)) {
    db.exec("BEGIN IMMEDIATE");
    for (const r of chunk) insert.run(r.emitterId, `${r.ms}-0`, r.ms, r.ms, r.json, r.meta);
    db.exec("COMMIT");
  }
  db.close();
}

async function fillPostgres(url: string, sources: string[], total: number, startMs: number): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    for (const chunk of rows(sources, total, startMs)) {
      await client.query(
        `INSERT INTO events (emitter_id, channel, id, id_ms, id_seq, indexed_at_ms, event_json, meta_json)
         SELECT e, '', m::text || '-0', m, 0, m, j, t FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[]) AS u(e, m, j, t)`,
        [
          chunk.map((r) => r.emitterId),
          chunk.map((r) => r.ms),
          chunk.map((r) => r.json),
          chunk.map((r) => r.meta),
        ],
      );
    }
    // What autovacuum does after such a load: statistics for the planner, and a vacuum, which empties the
    // GIN indexes' pending lists and marks the pages all-visible. Without it the first searches met the
    // table as a bulk load leaves it, which no steady ingest does: common text across the sources took
    // p95 1,146 ms (p50 52.5) against 190 ms (93.5) after a vacuum (docs/architecture.md, "Performance").
    await client.query("VACUUM ANALYZE events");
  } finally {
    await client.end();
  }
}

/** The p50 and p95 of `samples` timed GETs of `path(i)` (after three untimed ones). */
async function timed(
  fount: FountProcess,
  path: (i: number) => string,
): Promise<{ p50: number; p95: number; found: number }> {
  let found = 0;
  const ms: number[] = [];
  for (let i = -3; i < samples; i++) {
    const started = performance.now();
    const res = await fount.apiRaw("GET", path(i), undefined, 120_000);
    const took = performance.now() - started;
    if (res.status !== 200)
      throw new Error(`GET ${path(i)} answered ${res.status}: ${res.text.slice(0, 200)}`);
    if (i >= 0) {
      ms.push(took);
      found += res.json.data.length;
    }
  }
  const d = distribution(ms);
  const sorted = [...ms].sort((a, b) => a - b);
  return { p50: d.p50, p95: sorted[Math.ceil(0.95 * sorted.length) - 1]!, found };
}

async function oneStore(
  ctx: PartContext,
  figures: Figure[],
  details: Record<string, unknown>,
  store: BenchStore,
  total: number,
) {
  const label = store.driver === "sqlite" ? "SQLite" : "PostgreSQL";
  const fount = await ctx.fount(store);
  const sources: string[] = [];
  for (let i = 0; i < 5; i++) {
    const id = (await fount.deploy(emitterCode(`search-${i}`, false), `search-${i}`)).id;
    // Every stored event is kept: with the default window (100) the pruner would delete the load.
    const kept = await fount.apiRaw("PUT", `/v1/sources/${id}`, { retention: { events: total } });
    if (kept.status !== 200) throw new Error(`retention of ${id}: ${kept.status} ${kept.text.slice(0, 200)}`);
    sources.push(id);
  }
  const startMs = Date.now() - total - 60_000;
  const filled = performance.now();
  if (store.driver === "sqlite")
    await fillSqlite(path.join(fount.dataDir, "fount.db"), sources, total, startMs);
  else await fillPostgres(fount.databaseUrl!, sources, total, startMs);
  const fillS = (performance.now() - filled) / 1000;
  ctx.log(`${label}: ${total} events stored in ${fillS.toFixed(1)} s`);
  // SQLite indexes stored events after their commit (storage/sqlite/search-indexer.ts) and catches up
  // before a search: the first search after the load waits for all of it, untimed here.
  const indexed = performance.now();
  const first = await fount.apiRaw(
    "GET",
    `/v1/sources/${sources[0]}/event_summaries?limit=1&q=zzzz`,
    undefined,
    1_800_000,
  );
  if (first.status !== 200)
    throw new Error(`first search answered ${first.status}: ${first.text.slice(0, 200)}`);
  ctx.log(
    `${label}: the first search, indexing what was not yet, took ${((performance.now() - indexed) / 1000).toFixed(1)} s`,
  );

  const searched = sources[0]!;
  const own = `/v1/sources/${searched}/event_summaries?limit=10`;
  const across = "/v1/users/me/event_summaries?limit=10";
  // Events of the searched source are the even ones; each sample looks for another.
  const rareIn = (i: number) => orderId(((i + 5) * 104_729 * 2) % total);
  const rareAny = (i: number) => orderId(((i + 5) * 104_729) % total);
  const queries: Array<[string, string, (i: number) => string, number | undefined]> = [
    ["text, one match, within the source", "within", (i) => `${own}&q=${rareIn(i)}`, 200],
    [
      "text, 2.5 % match, within the source",
      "within-common",
      (i) => `${own}&q=${cities[(i + 40) % cities.length]}`,
      undefined,
    ],
    [
      "JSON path, 1 in 5,000, within the source",
      "where",
      (i) => `${own}&where=customer.id:cus_${((i + 5) * 37 * 2) % 5_000}`,
      undefined,
    ],
    ["text, one match, across the account's sources", "across", (i) => `${across}&q=${rareAny(i)}`, 500],
    [
      "text, 2.5 % match, across the account's sources",
      "across-common",
      (i) => `${across}&q=${cities[(i + 40) % cities.length]}`,
      undefined,
    ],
  ];
  for (const [name, key, path, target] of queries) {
    const t = await timed(fount, path);
    details[`${store.driver}-${key}`] = t;
    figures.push(
      figure(
        part,
        `${name}, p95`,
        t.p95,
        "ms",
        target ? { op: "<=", value: target } : undefined,
        `p50 ${t.p50.toFixed(1)} ms; ${total.toLocaleString("en-US")} events`,
      ),
    );
  }

  // Another source's hits while the worst search runs back to back (each counts every event of the
  // searched source), against the same hits without it.
  const other = await fount.deploy(emitterCode("search-ingest", false), "search-ingest");
  const steady = { url: other.endpointUrl, body: payloadText, connections: 10, overallRate: steadyRate };
  await runLoad({ ...steady, durationS: 2 });
  const quiet = await runLoad({ ...steady, durationS: searchingS });
  const during: number[] = [];
  const searchMs: number[] = [];
  let searching = true;
  const searches = (async () => {
    while (searching) {
      const started = performance.now();
      const res = await fount.apiRaw("GET", `${own}&q=order`, undefined, 120_000);
      if (res.status !== 200) throw new Error(`GET ${own}&q=order answered ${res.status}`);
      searchMs.push(performance.now() - started);
    }
  })();
  try {
    await runLoad({ ...steady, durationS: searchingS, latencies: during });
  } finally {
    searching = false;
    await searches;
  }
  const hits = distribution(during);
  const search = distribution(searchMs);
  details[`${store.driver}-ingest-while-searching`] = { hits, search, quietP99: quiet.latencyMs.p99 };
  figures.push(
    figure(
      part,
      "another source's ingest p99 while every event is searched",
      hits.p99,
      "ms",
      { op: "<=", value: 25 },
      `${steadyRate}/s offered; p50 ${hits.p50.toFixed(1)} ms; p99 without searches ${quiet.latencyMs.p99.toFixed(1)} ms; ` +
        `${searchMs.length} searches matching ${(total / 2).toLocaleString("en-US")} events, p50 ${search.p50.toFixed(0)} ms`,
    ),
  );

  // The plan of a rare text search and the indexes' size, from the store itself.
  let opened: Storage;
  if (store.driver === "sqlite") opened = openSqliteStorage({ dataDir: fount.dataDir });
  else {
    const schema = new URL(fount.databaseUrl!).searchParams.get("options")!.replace("-c search_path=", "");
    opened = await openPostgresStorage({ url: store.url, schema, poolSize: 1 });
  }
  try {
    const plan = await opened.explainEventSearch(
      { emitterId: searched, channel: "", text: [rareIn(0)] },
      { limit: 11 },
    );
    details[`${store.driver}-plan`] = plan;
    ctx.log(`${label} plan of a text search within a source:\n${plan}`);
  } finally {
    await opened.close();
  }
  details[`${store.driver}-index-bytes`] = await indexBytes(fount, store);
  const bytes = details[`${store.driver}-index-bytes`] as number;
  if (bytes > 0) figures.push(figure(part, "search indexes per event", bytes / total, "bytes"));
}

/**
 * Bytes of the search indexes: on SQLite the index file's pages in use (FTS5's tables, with the copy of
 * each event's text it keeps), on PostgreSQL the two GIN indexes.
 */
async function indexBytes(fount: FountProcess, store: BenchStore): Promise<number> {
  if (store.driver === "sqlite") {
    const db = new DatabaseSync(path.join(fount.dataDir, "fount-search.db"), { readOnly: true });
    const pragma = (name: string) =>
      Number((db.prepare(`PRAGMA ${name}`).get() as Record<string, number>)[name]);
    try {
      return (pragma("page_count") - pragma("freelist_count")) * pragma("page_size");
    } finally {
      db.close();
    }
  }
  const client = new pg.Client({ connectionString: fount.databaseUrl });
  await client.connect();
  try {
    const r = await client.query(
      "SELECT pg_relation_size('events_text') + coalesce(pg_relation_size(to_regclass('events_json')), 0) AS n",
    );
    return Number(r.rows[0].n);
  } finally {
    await client.end();
  }
}

export async function historySearch(
  ctx: PartContext,
  out: { figures: Figure[]; details: Record<string, unknown> },
): Promise<void> {
  const total = Number(process.env.FOUNT_BENCH_SEARCH_EVENTS ?? defaultEvents);
  if (!Number.isInteger(total) || total < 10)
    throw new Error("FOUNT_BENCH_SEARCH_EVENTS must be an integer of 10 or more");
  out.details.events = total;
  await oneStore(ctx, out.figures, out.details, ctx.settings.store, total);
}
