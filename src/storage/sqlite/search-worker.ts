/**
 * A search thread of the SQLite store (search-threads.ts starts them): runs event searches, deliveries
 * lists and the backlog's count on a read-only connection of its own, so that a search matching a
 * million events, a busy webhook's seven days of deliveries or a backlog of a million (their counts
 * alone walk every one) never holds up the server's event loop and every emit behind it.
 *
 * A search comes in two steps. `begin` takes the search's snapshot of the store and the index file
 * while the server holds the store's lock, right after it brought the index up to date, and answers at
 * once; the server then lets go of the lock, and the search runs on that snapshot and answers its
 * result. A search is thus as exact as one run under the lock: it finds every event acknowledged
 * before it, by its text at that time, and nothing written after.
 */
import { DatabaseSync } from "node:sqlite";
import { parentPort, workerData } from "node:worker_threads";
import type { Delivery, Page, PageQuery, WithSeq } from "../../domain/types.ts";
import type { EventSearch, EventSearchPage, EventSearchResult } from "../event-search.ts";
import type { DeliverySearch } from "../port.ts";
import { countBacklog } from "./deliveries.ts";
import { findDeliveries } from "./delivery-history.ts";
import { beginSearch, endSearch, findEvents, prepareSearchConnection } from "./event-search.ts";
import { Sql } from "./sql.ts";

export interface SearchWorkerData {
  storeFile: string;
  indexFile: string;
}

/** What a thread reads: events (`searchEvents`), deliveries (`searchDeliveries`) or the backlog (`countPendingDeliveries`). */
export type SearchQuery =
  | { kind: "events"; search: EventSearch; page: EventSearchPage }
  | { kind: "deliveries"; search: DeliverySearch; page: PageQuery }
  | { kind: "backlog"; nowMs: number };

/** What each kind answers. */
export interface SearchResults {
  events: EventSearchResult;
  deliveries: Page<WithSeq<Delivery>>;
  backlog: { pending: number; due: number };
}

export type SearchRequest = { id: number } & SearchQuery;

/**
 * `ready` once, when the thread can take requests; then for each request, `begun` once its snapshot is
 * taken, then the result (or an error, in place of either).
 */
export type SearchReply =
  | { ready: true }
  | { id: number; begun: true }
  | { id: number; result: SearchResults[SearchQuery["kind"]] }
  | { id: number; error: string };

const { storeFile, indexFile } = workerData as SearchWorkerData;
const db = new DatabaseSync(storeFile, { readOnly: true });
db.exec("PRAGMA busy_timeout = 5000");
db.prepare("ATTACH DATABASE ? AS search").run(indexFile);
const q = new Sql(db);
prepareSearchConnection(q);

function find(query: SearchQuery, generations: number[]): SearchResults[SearchQuery["kind"]] {
  switch (query.kind) {
    case "events":
      return findEvents(q, query.search, query.page, generations);
    case "deliveries":
      return findDeliveries(q, query.search, query.page);
    case "backlog":
      return countBacklog(q, query.nowMs);
  }
}

parentPort!.postMessage({ ready: true } satisfies SearchReply);

parentPort!.on("message", ({ id, ...query }: SearchRequest) => {
  let generations: number[];
  try {
    generations = beginSearch(q);
  } catch (err) {
    parentPort!.postMessage({ id, error: (err as Error).message } satisfies SearchReply);
    return;
  }
  parentPort!.postMessage({ id, begun: true } satisfies SearchReply);
  let reply: SearchReply;
  try {
    reply = { id, result: find(query, generations) };
  } catch (err) {
    reply = { id, error: (err as Error).message };
  } finally {
    endSearch(q);
  }
  parentPort!.postMessage(reply);
});
