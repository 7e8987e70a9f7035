/**
 * The embedded store: SQLite through node:sqlite, one connection, WAL. Every operation runs under an
 * async lock so that an open transaction never sees statements of another caller interleaved. This
 * file opens the database and composes the operation files on it, as postgres/driver.ts does on a pool.
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
 *   SQLite only:      window-counts.ts (each event window's size), rows.ts (row type, LIMIT binding),
 *                     outbox-writes.ts (a transaction's outbox writes as multi-row statements; PostgreSQL
 *                     merges them in deferred.ts),
 *                     search-indexer.ts (the event search's index, kept up to date after commit),
 *                     search-threads.ts (event searches and deliveries lists run off the event loop, on
 *                     snapshots taken under the lock)
 *   PostgreSQL only:  cluster.ts (nodes, run leases, NOTIFY), health.ts (a lost database)
 */
import { chmodSync, mkdirSync } from "node:fs";
import path from "node:path";
import { DatabaseSync } from "node:sqlite";
import { AsyncLock } from "../../async-lock.ts";
import { alwaysAvailable } from "../health.ts";
import type { Storage, StorageOps } from "../port.ts";
import { accountOps, writeUsage } from "./accounts.ts";
import { appAccountOps } from "./app-accounts.ts";
import { DeferredWrites } from "./deferred.ts";
import { deliveryOps } from "./deliveries.ts";
import { deliveryHistoryOps } from "./delivery-history.ts";
import { eventSearchOps } from "./event-search.ts";
import { eventOps, writeClock } from "./events.ts";
import { migrate } from "./migrate.ts";
import { nodeOps } from "./node-ops.ts";
import { OutboxWrites } from "./outbox-writes.ts";
import { RowCache } from "./row-cache.ts";
import { type GenerationOptions, indexFileOf, SearchIndexer } from "./search-indexer.ts";
import { SearchThreads } from "./search-threads.ts";
import { sessionOps } from "./sessions.ts";
import { sourceOps } from "./sources.ts";
import { Sql } from "./sql.ts";
import { subscriptionOps } from "./subscriptions.ts";
import { timerOps } from "./timers.ts";
import { webhookOps } from "./webhooks.ts";
import { WindowCounts } from "./window-counts.ts";
import { workflowOps } from "./workflows.ts";

/**
 * Every operation of the port on one connection, without locking (the caller holds the lock). What
 * they share (statements, cached rows, window counts, held-back writes) is handed to each operation file
 * once, here, so that a call costs nothing beyond its own work.
 */
/**
 * Operations that never read or change deliveries: they run with the outbox writes still held. Any
 * other operation makes them first (outbox-writes.ts).
 */
const besideHeldOutbox = new Set<string>([
  "insertDeliveries",
  "settleDelivery",
  "insertEvent",
  "resourceOwner",
  "matchSubscriptions",
  "addUsage",
  "getEmitterClock",
  "putEmitterClock",
  "getDedupeState",
  "putDedupeState",
  "putSourceDb",
  "assertSourceLease",
  "getSource",
  "getUser",
  "getWebhook",
]);

/** `ops` with the held outbox writes made before each operation not in `besideHeldOutbox`. */
function settlingOutbox(ops: StorageOps, outbox: OutboxWrites): StorageOps {
  const out: Record<string, unknown> = {};
  for (const [name, op] of Object.entries(ops)) {
    const fn = op as (...a: unknown[]) => unknown;
    out[name] = besideHeldOutbox.has(name)
      ? fn
      : (...args: unknown[]) => {
          outbox.settle();
          return fn(...args);
        };
  }
  return out as unknown as StorageOps;
}

function opsOn(
  q: Sql,
  rows: RowCache,
  counts: WindowCounts,
  held: DeferredWrites,
  outbox: OutboxWrites,
  search: Sql,
  indexer: SearchIndexer,
): StorageOps {
  return {
    ...accountOps(q, rows, held),
    ...sessionOps(q),
    ...webhookOps(q, rows),
    ...subscriptionOps(q, rows),
    ...sourceOps(q, rows, held),
    ...timerOps(q),
    ...eventOps(q, counts, held),
    ...appAccountOps(q),
    ...workflowOps(q, rows),
    ...deliveryOps(q, outbox),
    ...deliveryHistoryOps(q),
    ...eventSearchOps(search, async () => {
      held.settle();
      await indexer.catchUp();
    }),
    ...nodeOps(q),
  };
}

/**
 * Opens (creating if needed) `<dataDir>/fount.db`, applies migrations and returns the store. The event
 * search's index is brought up to date every `searchIndexDelayMs` (default 1 s) and before each search.
 */
export function openSqliteStorage(options: {
  dataDir: string;
  file?: string;
  searchIndexDelayMs?: number;
  /** The search index's generations (tests make them small). */
  searchGenerations?: GenerationOptions;
}): Storage {
  mkdirSync(options.dataDir, { recursive: true });
  // Sandboxed executors run under other uids and may traverse into the package cache below the data
  // dir, but must never list it or read the database: 0711 on the dir, 0600 on the files.
  chmodSync(options.dataDir, 0o711);
  const file = options.file ?? path.join(options.dataDir, "fount.db");
  const db = new DatabaseSync(file);
  db.exec(
    "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 5000;",
  );
  // The store's worker thread checkpoints the WAL (store-worker.ts); this connection does only past ten
  // times SQLite's default, should the worker fall behind or be gone.
  db.exec("PRAGMA wal_autocheckpoint = 10000");
  for (const suffix of ["", "-wal", "-shm"]) {
    try {
      chmodSync(file + suffix, 0o600);
    } catch {
      // -wal/-shm exist only once written; they inherit the umask until then.
    }
  }
  migrate(db);

  const q = new Sql(db);
  const rows = new RowCache();
  const counts = new WindowCounts();
  const held = new DeferredWrites({
    putClock: (emitterId, ms, seq) => writeClock(q, emitterId, ms, seq),
    addUsage: (userId, day, d) => writeUsage(q, userId, day, d),
  });
  const outbox = new OutboxWrites(q);
  const indexFile = indexFileOf(file);
  const indexer = new SearchIndexer(q, file, indexFile, options.searchGenerations);
  // Searches read on a connection of their own, with the index file attached: attached to the writing
  // connection, every BEGIN IMMEDIATE would also take the index file's write lock from the worker.
  const reader = new DatabaseSync(file, { readOnly: true });
  reader.exec("PRAGMA busy_timeout = 5000");
  reader.prepare("ATTACH DATABASE ? AS search").run(indexFile);
  const ops = settlingOutbox(opsOn(q, rows, counts, held, outbox, new Sql(reader), indexer), outbox);
  const searchThreads = new SearchThreads(file, indexFile);
  const lock = new AsyncLock();
  indexer.start(lock, db, options.searchIndexDelayMs ?? 1000);
  let closed = false;
  /** True while a transaction, which may change cached rows before it commits or rolls back, is open. */
  let inTransaction = false;
  const locked = lockedOperations(ops, lock);
  /** A search thread's snapshot, taken under the lock once the outbox writes held back are made. */
  const afterOutbox = (begin: () => Promise<void>) =>
    lock.run(async () => {
      outbox.settle();
      await begin();
    });
  const cacheFirst =
    <R>(peek: (id: string) => R | undefined, read: (id: string) => Promise<R>) =>
    (id: string): Promise<R> => {
      const hit = inTransaction ? undefined : peek(id);
      return hit ? Promise.resolve(hit) : read(id);
    };
  // `fount admin` writes accounts through its own connection while the server runs: the cached keys and
  // memberships are forgotten once another connection committed, which this pragma tells. It costs about
  // what a read does (it takes the WAL's read lock), so it is asked once per turn of the event loop: a
  // request's key and its organizations are read in one turn, and a change then counts from the next.
  const dataVersion = db.prepare("PRAGMA data_version");
  let seenVersion = dataVersion.get()?.data_version;
  let checkedThisTurn = false;
  const accountsPeek =
    <R>(peek: (id: string) => R | undefined) =>
    (id: string): R | undefined => {
      if (!checkedThisTurn) {
        checkedThisTurn = true;
        setImmediate(() => {
          checkedThisTurn = false;
        });
        const version = dataVersion.get()?.data_version;
        if (version !== seenVersion) {
          seenVersion = version;
          rows.forgetAccounts();
          return undefined;
        }
      }
      return peek(id);
    };
  return {
    ...locked,
    // Read on every endpoint hit: a cached row is answered without queuing for the lock (a few promise
    // turns per hit), except while a transaction is open, whose writes are not committed yet.
    getSourceByEndpoint: cacheFirst((id) => rows.sourcesByEndpoint.get(id), locked.getSourceByEndpoint),
    getUser: cacheFirst((id) => rows.users.get(id), locked.getUser),
    getSource: cacheFirst((id) => rows.sourcesById.get(id), locked.getSource),
    // Once a thread is free (a wait for one lets events pile up for the index), what the search must
    // find is indexed without the lock (a bulk load, an upgrade, a tenant's large events). Under the lock:
    // one short batch of what was stored since, the writes held back, then the search thread's snapshot;
    // the search itself runs on its thread after the lock is let go (search-threads.ts).
    searchEvents: (search, page) =>
      searchThreads.read({ kind: "events", search, page }, (begin) =>
        indexer.beforeSearch(lock, async () => {
          outbox.settle();
          held.settle();
          await begin();
        }),
      ),
    // On a search thread too, after the outbox writes held back: a busy webhook's count walks millions,
    // and so does the backlog's (`/metrics`).
    searchDeliveries: (search, page) => searchThreads.read({ kind: "deliveries", search, page }, afterOutbox),
    countPendingDeliveries: (nowMs) => searchThreads.read({ kind: "backlog", nowMs }, afterOutbox),
    // Read by every API request's key check.
    findApiKeyByHash: cacheFirst(
      accountsPeek((hash) => rows.keys.get(hash)),
      locked.findApiKeyByHash,
    ),
    listOrgsOfUser: cacheFirst(
      accountsPeek((id) => rows.orgsOfUser.get(id)),
      locked.listOrgsOfUser,
    ),
    driver: "sqlite",
    capabilities: { listenNotify: false, skipLocked: false, sharedByNodes: false },
    // The file lives with the process: it cannot go away while the server runs.
    health: alwaysAvailable,
    transaction: <T>(fn: (tx: StorageOps) => Promise<T>): Promise<T> =>
      lock.run(async () => {
        db.exec("BEGIN IMMEDIATE");
        held.start();
        outbox.start();
        inTransaction = true;
        try {
          const result = await fn(ops);
          outbox.end();
          held.end();
          db.exec("COMMIT");
          return result;
        } catch (err) {
          outbox.end(true);
          held.end(true);
          db.exec("ROLLBACK");
          // The transaction may have cached rows it wrote.
          rows.clear();
          counts.clear();
          throw err;
        } finally {
          inTransaction = false;
        }
      }),
    ping: async () => {
      await lock.run(() => db.prepare("SELECT 1").get());
    },
    close: async () => {
      if (closed) return;
      closed = true;
      await searchThreads.close();
      await indexer.stop();
      await lock.run(() => {
        reader.close();
        db.close();
      });
    },
  };
}

/** Every StorageOps method of `ops`, each running under the lock so it never joins another's transaction. */
function lockedOperations(ops: StorageOps, lock: AsyncLock): StorageOps {
  const out: Record<string, unknown> = {};
  for (const [name, op] of Object.entries(ops)) {
    out[name] = (...args: unknown[]) => lock.run(() => (op as (...a: unknown[]) => unknown)(...args));
  }
  return out as unknown as StorageOps;
}
