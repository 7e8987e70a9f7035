/**
 * The networked store: PostgreSQL through a `pg` pool. Operations outside a transaction each take a
 * pooled connection; a transaction holds one connection from BEGIN to COMMIT.
 *
 * Unlike the SQLite driver, nothing here is an authority kept in process memory (no window slots, no
 * row caches trusted for long): several processes may write the same database. The rows every hit and
 * commit reads are cached for half a second at most, and cleared on every node by a change made through
 * any of them (row-cache.ts).
 *
 * Where each concern lives: the same file in sqlite/ and postgres/ (storage/concerns.ts types the
 * slice of the port each of these implements).
 *   accounts.ts       users, organizations, memberships, API keys, daily usage
 *   sessions.ts       console sessions
 *   webhooks.ts       webhooks
 *   subscriptions.ts  subscriptions, auto-subscriptions, routing matches, owners of resources
 *   sources.ts        components, sources, a source's db and dedupe state, its run lease check
 *   timers.ts         timers of sources
 *   events.ts         event windows, emitter clocks
 *   app-accounts.ts   connected app accounts
 *   workflows.ts      external workflows
 *   deliveries.ts     the deliveries outbox and its attempts
 *   delivery-history.ts  deliveries by listener or event with filters, one event by ID, replay marks
 *   node-ops.ts       meta, a sealed-secret sample, transaction locks, API rate limits
 *   sql.ts            statement helpers
 *   migrate.ts        numbered schema migrations (migrations/)
 *   row-cache.ts      rows kept in memory (SQLite: until its own writes; PostgreSQL: 0.5 s at most)
 *   deferred.ts       writes held back inside a transaction
 *   SQLite only:      window-slots.ts (each event window's slots), rows.ts (row type, LIMIT binding)
 *   PostgreSQL only:  cluster.ts (nodes, run leases, NOTIFY), health.ts (a lost database)
 */
import pg from "pg";
import type { Storage, StorageOps } from "../port.ts";
import { StoreOpenError } from "../schema-version.ts";
import { accountOps } from "./accounts.ts";
import { appAccountOps } from "./app-accounts.ts";
import { clusterStore } from "./cluster.ts";
import { DeferringClient } from "./deferred.ts";
import { deliveryOps } from "./deliveries.ts";
import { deliveryHistoryOps } from "./delivery-history.ts";
import { eventSearchOps } from "./event-search.ts";
import { eventOps, prepareWindowInsert } from "./events.ts";
import { PostgresHealth, probeOnce } from "./health.ts";
import { migrate, quoteIdent } from "./migrate.ts";
import { nodeOps } from "./node-ops.ts";
import { type CacheKind, cacheKinds, RowCache, withRowCache } from "./row-cache.ts";
import { sessionOps } from "./sessions.ts";
import { sourceOps } from "./sources.ts";
import { type Queryable, Sql } from "./sql.ts";
import { subscriptionOps } from "./subscriptions.ts";
import { timerOps } from "./timers.ts";
import { webhookOps } from "./webhooks.ts";
import { workflowOps } from "./workflows.ts";

export interface PostgresOptions {
  /** `postgres://user:password@host:port/database` (libpq-style parameters too). */
  url: string;
  /** A schema to keep the tables in (created if missing); default: the connection's search path. */
  schema?: string;
  /** Connections in the pool. */
  poolSize?: number;
  /**
   * How long an operation may wait for a pooled connection, and a statement for its answer, before it
   * fails as `store_unavailable` (ms; default 5 s).
   */
  timeoutMs?: number;
  /** How long a cached row is trusted without hearing of a change (ms; default `rowCacheTtlMs`). */
  rowCacheTtlMs?: number;
  /**
   * Refuses (`no_store`) a schema that holds no Fount store instead of creating one there: for
   * `fount admin` commands, where a mistyped DATABASE_URL would otherwise get an empty store.
   */
  existingOnly?: boolean;
}

/**
 * Connections per process: a group commit holds one, and the rest serve reads and the dispatcher;
 * PostgreSQL's default of 100 connections then admits several nodes.
 */
const defaultPoolSize = 10;

/** How long a start waits for PostgreSQL to answer before it gives up with a one-line error. */
const connectTimeoutMs = 10_000;

/**
 * Once running, an operation waits this long for a connection or an answer before the caller gets 503:
 * long enough for a query on a loaded machine (round trips of 40 ms were seen), short enough that a
 * client of a node whose database went away gets its answer in a few seconds rather than hanging.
 */
const defaultTimeoutMs = 5_000;

/** The client-side bound of a query lies this far past the server's `statement_timeout` (network). */
const queryTimeoutSlackMs = 1_000;

/** How often a lost database is probed until it answers again. */
const probeIntervalMs = 1_000;

/** BIGINT (OID 20) as a JS number: IDs, counts and epoch milliseconds all stay below 2^53. */
const types = {
  getTypeParser: ((oid: number, format?: string) =>
    oid === 20
      ? (value: string) => Number(value)
      : pg.types.getTypeParser(oid, format as "text")) as typeof pg.types.getTypeParser,
};

/**
 * Every operation of the port on one Queryable (the pool, or a transaction's client). `inTransaction`:
 * routing reads of the transaction are remembered until it ends (subscriptions.ts).
 */
function opsOn(db: Queryable, inTransaction = false): StorageOps {
  const q = new Sql(db);
  return {
    ...accountOps(q),
    ...sessionOps(q),
    ...webhookOps(q),
    ...subscriptionOps(q, inTransaction),
    ...sourceOps(q),
    ...timerOps(q),
    ...eventOps(q),
    ...appAccountOps(q),
    ...workflowOps(q),
    ...deliveryOps(q),
    ...deliveryHistoryOps(q),
    ...eventSearchOps(q),
    ...nodeOps(q),
  };
}

/**
 * The settings every connection starts with, as server `options`: asynchronous commit, the schema, then
 * whatever the URL's own `options` say (later ones win, so the URL can turn synchronous commit back on).
 * `pg` lets a URL's `options` replace the pool's, so they are taken out of the URL and joined here.
 *
 * Asynchronous commit (`synchronous_commit=off`): a COMMIT returns once its WAL is written to PostgreSQL's
 * buffers, not flushed to disk. On this machine a flushed commit costs 14 ms, and a source's invocations
 * commit one after another, so one source could store about 70 commits a second. What is committed
 * survives any crash of Fount (what the at-least-once delivery promise is about) and cannot be
 * corrupted; a crash of PostgreSQL or of the machine may lose the last moment of commits (at most three
 * `wal_writer_delay`s, 0.6 s by default) — like the SQLite store's `synchronous=NORMAL` on a power loss.
 */
function sessionSettings(
  options: PostgresOptions,
  extra: string[] = [],
): { connectionString: string; serverOptions: string } {
  const settings = ["-c synchronous_commit=off", ...extra];
  if (options.schema !== undefined) settings.push(`-c search_path=${quoteIdent(options.schema)}`);
  let connectionString = options.url;
  try {
    const url = new URL(options.url);
    const own = url.searchParams.get("options");
    if (own !== null) {
      settings.push(own);
      url.searchParams.delete("options");
      connectionString = url.toString();
    }
  } catch {
    // Not a URL (a libpq keyword string): passed on as it is.
  }
  return { connectionString, serverOptions: settings.join(" ") };
}

/** Where the store is, without credentials: for error messages. */
function describe(url: string): string {
  try {
    const u = new URL(url);
    return `${u.hostname || "localhost"}:${u.port || 5432}${u.pathname}`;
  } catch {
    return "DATABASE_URL";
  }
}

/** Throws `no_store` unless the connection's schema (or `options.schema`) has Fount's migrations table. */
async function refuseWithoutStore(client: pg.Client, options: PostgresOptions): Promise<void> {
  const table =
    options.schema === undefined ? "schema_migrations" : `${quoteIdent(options.schema)}.schema_migrations`;
  const { rows } = await client.query("SELECT to_regclass($1) IS NOT NULL AS found", [table]);
  if (!rows[0]?.found) {
    throw new StoreOpenError(
      "no_store",
      `no Fount store at ${describe(options.url)}: check DATABASE_URL (and its search_path), or start the server once to create it`,
    );
  }
}

/** Connects, applies migrations and returns the store; a database that cannot be reached throws StoreOpenError. */
export async function openPostgresStorage(options: PostgresOptions): Promise<Storage> {
  const { connectionString, serverOptions } = sessionSettings(options);
  // Migrations run on a connection of their own, without the running store's timeouts: a node may wait
  // for another's migration lock, and a migration of a large table may take long.
  const client = new pg.Client({
    connectionString,
    options: serverOptions,
    connectionTimeoutMillis: connectTimeoutMs,
    types,
  });
  // A connection error is also emitted as an event; unheard, it would end the process.
  client.on("error", () => undefined);
  try {
    await client.connect();
  } catch (err) {
    await client.end().catch(() => undefined);
    throw new StoreOpenError(
      "store_unreachable",
      `cannot reach PostgreSQL at ${describe(options.url)}: ${(err as Error).message || (err as Error).name}`,
      { cause: err },
    );
  }
  try {
    if (options.existingOnly) await refuseWithoutStore(client, options);
    await migrate(client, options.schema);
  } finally {
    await client.end().catch(() => undefined);
  }

  // Every operation is bounded (docs/operations.md, "When the database goes away"): waiting for a
  // pooled connection, and each statement, on the server (`statement_timeout`) and in the client.
  const timeoutMs = options.timeoutMs ?? defaultTimeoutMs;
  const running = sessionSettings(options, [`-c statement_timeout=${timeoutMs}`]);
  const pool = new pg.Pool({
    connectionString: running.connectionString,
    options: running.serverOptions,
    max: options.poolSize ?? defaultPoolSize,
    connectionTimeoutMillis: timeoutMs,
    query_timeout: timeoutMs + queryTimeoutSlackMs,
    types,
  });
  // An idle connection that breaks (a restart of PostgreSQL) is dropped by the pool; without a listener
  // its error would end the process. The next query opens a fresh connection or fails on its own.
  pool.on("error", () => undefined);
  const health = new PostgresHealth({
    probe: () =>
      probeOnce({
        connectionString: running.connectionString,
        options: running.serverOptions,
        connectionTimeoutMillis: timeoutMs,
        query_timeout: timeoutMs + queryTimeoutSlackMs,
      }),
    intervalMs: probeIntervalMs,
  });

  const rows = new RowCache({ ttlMs: options.rowCacheTtlMs });
  /** The pool's connections that have prepared `fount_window_insert` (events.ts). */
  const prepared = new WeakSet<pg.PoolClient>();
  // A named statement goes to `pg` as a query config: it prepares it once per connection.
  const pooled: Queryable = {
    query: (text, params, name) =>
      name === undefined ? pool.query(text, params) : pool.query({ name, text, values: params }),
  };
  const ops = withRowCache(opsOn(health.guarded(pooled)), rows);
  const cluster = {
    ...clusterStore(new Sql(health.guarded(pooled)), {
      connectionString: running.connectionString,
      options: running.serverOptions,
      connectionTimeoutMillis: timeoutMs,
    }),
    onStale: (listener: (kinds: string[]) => void) => rows.onChange(listener),
    forgetCached: (kinds?: string[]) =>
      rows.forget(kinds === undefined ? cacheKinds : cacheKinds.filter((k) => kinds.includes(k))),
  };
  let closed = false;
  return {
    ...ops,
    driver: "postgres",
    capabilities: { listenNotify: true, skipLocked: true, sharedByNodes: true },
    cluster,
    health,
    transaction: async <T>(fn: (tx: StorageOps) => Promise<T>): Promise<T> => {
      const tx = await health.guard(() => pool.connect());
      const deferring = new DeferringClient(tx);
      const written = new Set<CacheKind>();
      let broken = false;
      // A checked-out connection that breaks emits "error" besides failing its query; unheard, that
      // would end the process. The connection is then closed, not returned to the pool.
      const onError = () => {
        broken = true;
      };
      tx.on("error", onError);
      try {
        // BEGIN is sent with the transaction's first statement.
        deferring.defer("BEGIN", []);
        try {
          // Once per connection, in a round trip of its own: a PREPARE outlives a rollback, so one sent
          // with a transaction that failed might or might not exist afterwards.
          if (!prepared.has(tx)) {
            await tx.query(prepareWindowInsert);
            prepared.add(tx);
          }
          const result = await fn(withRowCache(opsOn(deferring, true), rows, { written }));
          // The held-back writes and the COMMIT in one round trip.
          await deferring.flush("COMMIT");
          return result;
        } catch (err) {
          deferring.discard();
          if (!broken) {
            await tx.query("ROLLBACK").catch(() => {
              broken = true;
            });
          }
          throw health.classify(err);
        }
      } finally {
        // Committed or not, what it wrote is visible now (or never was): cached rows are read afresh.
        rows.changed(written);
        tx.removeListener("error", onError);
        // A connection whose ROLLBACK failed is in an unknown state: the pool closes it.
        tx.release(broken);
      }
    },
    ping: async () => {
      await health.guard(() => pool.query("SELECT 1"));
    },
    close: async () => {
      if (closed) return;
      closed = true;
      health.close();
      await pool.end();
    },
  };
}
