/**
 * The event search on PostgreSQL (docs/streams.md, "Searching events"; mirrors sqlite/event-search.ts).
 * `q` is ILIKE '%…%' on the stored JSON text's first `indexedChars` characters, which the pg_trgm GIN
 * index `events_text` serves (migrations 014, 028); `where` is JSONB containment (`@>`) on the parsed JSON (`event_jsonb`, NULL for the JSON
 * PostgreSQL's jsonb refuses), read from the rows whose text holds the value as a word (`whereWord`) or
 * the path's last key and the value side by side (`whereNeedles`), which the same trigram index finds:
 * the same matches as SQLite's FTS5 trigram table and JSON functions. (Migration 024 dropped the
 * jsonb_path_ops index that served `where` before: it cost every kept event about 7 µs of PostgreSQL's
 * CPU and 60 bytes.) The trigram index holds only `searchable` rows (migration 016): the rows a small
 * window's commit stored are read through the partial index `events_unsearched` until the search
 * indexer has put them in.
 */
import type { EventRecord } from "../../domain/types.ts";
import type { EventSearchOps } from "../concerns.ts";
import {
  commonConditions,
  type EventSearch,
  type EventSearchPage,
  type EventWhere,
  indexedChars,
  pageOrder,
  rowsWithin,
  trigramChars,
  whereNeedles,
  whereValues,
  whereWord,
} from "../event-search.ts";
import { toEvent } from "../rows.ts";
import type { Sql } from "./sql.ts";

/** An ILIKE pattern matching `term` anywhere (its `%`, `_` and `\` taken literally). */
export function likePattern(term: string): string {
  return `%${term.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

/**
 * What a term is matched against: the stored text, which the trigram index `events_text` serves, for a
 * term of a trigram or more; for a shorter one (`42` in `order 42`), which has no trigram, an expression
 * the index does not serve, so the planner checks it on the rows the other words found (pg_trgm would
 * answer such a pattern on its own with every entry of the index).
 */
function textOf(term: string): string {
  return [...term].length >= trigramChars ? indexedText : `(${indexedText} || '')`;
}

/**
 * Stored bytes of event text one statement of the search indexer puts in the trigram index: about a
 * second of PostgreSQL's time here for random words, the worst case (the default statement timeout is 5 s).
 */
const indexBatchBytes = 1024 * 1024;

/** The text the trigram index `events_text` holds (migration 028): the first `indexedChars` of the JSON. */
const indexedText = `left(e.event_json, ${indexedChars})`;

/** The JSON document that contains exactly `value` at `path`: `{"body":{"user":{"id":42}}}`. */
function containing(path: string[], value: unknown): string {
  let doc: unknown = value;
  for (const key of [...path].reverse()) doc = { [key]: doc };
  return JSON.stringify(doc);
}

/**
 * The events a search reads: those in the trigram index and those not yet in it, as two arms, so that
 * the planner gives each the search's conditions and its own partial indexes (`events_text` for the
 * first, `events_unsearched`, a window's newest rows at most, for the second).
 */
const searchedEvents =
  "(SELECT * FROM events WHERE searchable UNION ALL SELECT * FROM events WHERE NOT searchable)";

/** The query of a search's page, and its parameters (`$1…`). */
function searchQuery(
  search: EventSearch,
  page: EventSearchPage,
): { body: string; order: string; params: unknown[] } {
  const params: unknown[] = [];
  const where: string[] = [];
  const p = (value: unknown) => {
    params.push(value);
    return `$${params.length}`;
  };
  for (const term of search.text ?? []) where.push(`${textOf(term)} ILIKE ${p(likePattern(term))}`);
  for (const w of search.where ?? []) where.push(whereCondition(w, p));
  // The owners' sources as an array computed once (an InitPlan), not a join: the planner, which takes
  // an owner to have one source, put the sources outside a nested loop and read the trigram index once
  // per source (rare text across 5 sources, 1,000,000 events: 74 against 18.5 ms; docs/architecture.md).
  const common = commonConditions(
    search,
    page,
    (n) => `$${n}`,
    params.length,
    (subquery) => `= ANY(ARRAY(${subquery}))`,
  );
  where.push(...common.where);
  params.push(...common.params);
  return { body: `FROM ${searchedEvents} e WHERE ${where.join(" AND ")}`, order: pageOrder(page), params };
}

/**
 * One `where`: the event contains the value at the path, as any of the JSON values it spells, looked
 * for first in the text, which the trigram index serves, as a word (`whereWord`) or else as each one's
 * needle (`whereNeedles`), then decided by containment.
 */
function whereCondition(w: EventWhere, p: (value: unknown) => string): string {
  const holds = (v: unknown) => `event_jsonb(e.event_json) @> ${p(containing(w.path, v))}::jsonb`;
  const word = whereWord(w);
  if (word !== undefined)
    return `(${indexedText} ILIKE ${p(likePattern(word))} AND (${whereValues(w.value).map(holds).join(" OR ")}))`;
  const each = whereNeedles(w).map(
    ({ value, text }) => `(${indexedText} ILIKE ${p(likePattern(text))} AND ${holds(value)})`,
  );
  return `(${each.join(" OR ")})`;
}

/**
 * A page cut at `maxBytes` of event JSON: the matches' keys and sizes first (octet_length of a TOASTed
 * text reads its header, not its value), then those rows that fit, by key (one deleted meanwhile is
 * left out).
 */
async function rowsFitting(
  q: Sql,
  body: string,
  order: string,
  params: unknown[],
  limit: number,
  maxBytes: number,
): Promise<EventRecord[]> {
  const sized = await q.all(
    `SELECT e.emitter_id, e.id_ms, e.id_seq, octet_length(e.event_json) AS n ${body} ${order} LIMIT $${params.length + 1}`,
    [...params, limit],
    (r) => ({
      emitterId: r.emitter_id as string,
      ms: String(r.id_ms),
      seq: String(r.id_seq),
      n: Number(r.n),
    }),
  );
  const keys = sized.slice(
    0,
    rowsWithin(
      sized.map((s) => s.n),
      maxBytes,
    ),
  );
  return q.all(
    `SELECT e.* FROM events e WHERE (e.emitter_id, e.id_ms, e.id_seq) IN
       (SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[])) ${order}`,
    [keys.map((k) => k.emitterId), keys.map((k) => k.ms), keys.map((k) => k.seq)],
    toEvent,
  );
}

export function eventSearchOps(q: Sql): EventSearchOps {
  return {
    searchEvents: async (search, page) => {
      const { body, order, params } = searchQuery(search, page);
      let items =
        page.maxBytes === undefined
          ? await q.all(
              `SELECT e.* ${body} ${order} LIMIT $${params.length + 1}`,
              [...params, page.limit],
              toEvent,
            )
          : await rowsFitting(q, body, order, params, page.limit, page.maxBytes);
      if (page.before) items = items.reverse();
      // Every match counts, whichever page this is.
      const all = page.count ? searchQuery(search, { limit: 0 }) : undefined;
      const totalCount = all
        ? Number(await q.get(`SELECT count(*) AS n ${all.body}`, all.params, (r) => r.n))
        : -1;
      return { items, totalCount };
    },

    explainEventSearch: async (search, page) => {
      const { body, order, params } = searchQuery(search, page);
      const rows = await q.all(
        `EXPLAIN SELECT e.* ${body} ${order} LIMIT $${params.length + 1}`,
        [...params, page.limit],
        (r) => r["QUERY PLAN"] as string,
      );
      return rows.join("\n");
    },

    // Rows locked by another node's indexer, or by a commit trimming them, are left to the next pass. The
    // ORDER BY is the order of `events_unsearched`, so that the plan reads it even where the table has no
    // statistics yet: the planner then takes half the rows for unsearched, and without the order a
    // sequential scan of the whole table looked cheap for a LIMIT (181 ms over 200,000 rows, against 0.07).
    //
    // A statement takes rows up to `indexBatchBytes` of their stored text too (the first row always), so
    // that 200 large events cannot make it outlast the store's statement timeout: it would then fail
    // on the same rows at every pass, and nothing would enter the index again. Fewer rows than `limit`
    // end the pass; the next one goes on a second later.
    indexEventsForSearch: (storedBeforeMs, limit) =>
      q.run(
        `UPDATE events SET searchable = true WHERE ctid = ANY(ARRAY(
           SELECT ctid FROM (
             SELECT ctid, row_number() OVER w AS k, sum(least(pg_column_size(event_json), ${indexedChars})) OVER w AS upto
             FROM (SELECT ctid, event_json, emitter_id, channel, id_ms, id_seq FROM events
                   WHERE NOT searchable AND indexed_at_ms < $1
                   ORDER BY emitter_id, channel, id_ms, id_seq LIMIT $2 FOR UPDATE SKIP LOCKED) AS waiting
             WINDOW w AS (ORDER BY emitter_id, channel, id_ms, id_seq)
           ) AS sized
           WHERE k = 1 OR upto <= $3))`,
        [storedBeforeMs, limit, indexBatchBytes],
      ),
  };
}
