/**
 * The event search on SQLite (docs/streams.md, "Searching events"; mirrors postgres/event-search.ts).
 * `q` goes to the FTS5 tables of the index's generations (search-generations.ts, trigram: trigrams
 * covering each word, case-insensitively), which lead the query, so a text search reads only the rows
 * whose text holds them, never every event; each match is joined to its row, so an entry whose event is
 * gone (left in its generation until the generation goes) is never found, and a word longer than a
 * trigram is checked against the row's text (the index keeps no positions);
 * `where` is read with the JSON functions, from the rows whose text holds its value as a word
 * (`whereWord`) or, for a shorter value, the path's last key and the value side by side (`whereNeedles`),
 * which the same index finds.
 */
import type { SQLInputValue } from "node:sqlite";
import type { EventSearchOps } from "../concerns.ts";
import {
  commonConditions,
  type EventSearch,
  type EventSearchPage,
  type EventSearchResult,
  type EventWhere,
  pageOrder,
  rowsWithin,
  trigramChars,
  whereNeedles,
  whereValues,
  whereWord,
} from "../event-search.ts";
import { toEvent } from "../rows.ts";
import { generationTable } from "./search-generations.ts";
import type { Sql } from "./sql.ts";

/**
 * An FTS5 query matching the rows whose text holds trigrams covering every term, each a quoted string
 * of three characters: the index keeps no positions (`detail = none`, search-generations.ts), so it
 * cannot match a longer term as a phrase, and `textCondition` then checks the term itself. The trigrams
 * side by side (at 0, 3, 6… and the last) rather than all of them: every trigram the query names is
 * one more list to walk in every generation, while the rows the others would have ruled out are few
 * and the check on the row rules them out anyway (a rare order ID over 300,000 events: 2.6 ms against
 * 6.9 ms with every trigram; docs/architecture.md, "The index's trigrams without their positions").
 * `anyOf` adds groups of which the row must hold one text each: the needles of a `where`.
 */
export function ftsQuery(terms: string[], anyOf: string[][] = []): string {
  const all = (texts: string[]): string[] => {
    const trigrams = new Set<string>();
    for (const text of texts) {
      const chars = [...text];
      const at = (i: number) => trigrams.add(chars.slice(i, i + 3).join(""));
      for (let i = 0; i + 3 <= chars.length; i += 3) at(i);
      if (chars.length >= 3) at(chars.length - 3);
    }
    return [...trigrams].map((t) => `"${t.replaceAll('"', '""')}"`);
  };
  // Each group: one of its texts (a `where`'s needles, one per JSON value its value spells).
  const groups = anyOf.map((texts) => `(${texts.map((t) => `(${all([t]).join(" AND ")})`).join(" OR ")})`);
  return [...all(terms), ...groups].join(" AND ");
}

/** The SQL function that checks a term with non-ASCII characters against an event's text. */
const holdsFolded = "fount_holds_folded";

/**
 * The condition that the event's text holds `term`, case-insensitively, for a term that is not one
 * trigram (a trigram's own match is exact): for a longer one, the index found rows holding each of its
 * trigrams, perhaps apart; a shorter one (`42` in `order 42`) has no trigram, and the rows the other
 * words found are checked for it. An ASCII term with SQLite's `lower` (ASCII only, in C, a fraction of
 * a microsecond a row); any other with JavaScript's `toLowerCase`, which folds the case of other
 * scripts (`É`, `Ü`) as the tokenizer does.
 */
function textCondition(term: string): { sql: string; param: string } | undefined {
  if ([...term].length === trigramChars) return undefined;
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the ASCII range is the point.
  if (/^[\x00-\x7f]*$/.test(term))
    return { sql: "instr(lower(e.event_json), ?) > 0", param: term.toLowerCase() };
  return { sql: `${holdsFolded}(e.event_json, ?)`, param: term.toLowerCase() };
}

/**
 * SQLite's JSON path of a `where` path: each key quoted as JSON writes it, since SQLite compares a quoted
 * label with the key as the JSON text spells it (`$."a\\b"` finds the key `a\b`, `$."a\b"` nothing).
 */
function jsonPath(path: string[]): string {
  return `$${path.map((k) => `.${JSON.stringify(k)}`).join("")}`;
}

/** The condition of one `where`, and its parameters. */
function whereCondition(w: EventWhere): { sql: string; params: SQLInputValue[] } {
  const path = jsonPath(w.path);
  const type = "json_type(e.event_json, ?)";
  const parts: string[] = [];
  const params: SQLInputValue[] = [];
  for (const value of whereValues(w.value)) {
    if (typeof value === "string") {
      parts.push(`(${type} = 'text' AND json_extract(e.event_json, ?) = ?)`);
      params.push(path, path, value);
    } else if (typeof value === "number") {
      parts.push(`(${type} IN ('integer', 'real') AND json_extract(e.event_json, ?) = ?)`);
      params.push(path, path, value);
    } else {
      parts.push(`${type} = ?`);
      params.push(path, value === null ? "null" : String(value));
    }
  }
  return { sql: `(${parts.join(" OR ")})`, params };
}

/** The index's generations, oldest first (read in the search's transaction). */
function generationsOf(q: Sql): number[] {
  return q.all("SELECT gen FROM search.text_generations ORDER BY gen", [], (r) => r.gen as number);
}

/** The query of a search's page (`select` names what it selects), and its parameters. */
function searchQuery(
  search: EventSearch,
  page: EventSearchPage,
  generations: number[],
): { body: string; order: string; params: SQLInputValue[] } {
  // A `where` whose value is a word goes with the text's words; any other, by its needles.
  const text = (search.text ?? []).filter((t) => [...t].length >= trigramChars);
  const needles: string[][] = [];
  for (const w of search.where ?? []) {
    const word = whereWord(w);
    if (word !== undefined) text.push(word);
    else needles.push(whereNeedles(w).map((n) => n.text));
  }
  const where: string[] = [];
  const params: SQLInputValue[] = [];
  // With words of a trigram or more, or a `where`, the FTS tables lead (CROSS JOIN keeps that order):
  // the rowids matching the text in each generation, then each one's row and the other conditions on
  // it; without, the events table's own indexes. No generation yet: nothing holds the text.
  let from = "events e";
  if (text.length > 0 || needles.length > 0) {
    const match = ftsQuery(text, needles);
    const each = generations.map((g) => {
      params.push(match);
      return `SELECT rowid AS r FROM search.${generationTable(g)} WHERE ${generationTable(g)} MATCH ?`;
    });
    if (each.length === 0) each.push("SELECT NULL AS r WHERE false");
    from = `(${each.join(" UNION ALL ")}) t CROSS JOIN events e ON e.rowid = t.r`;
  }
  for (const term of search.text ?? []) {
    const holds = textCondition(term);
    if (!holds) continue;
    where.push(holds.sql);
    params.push(holds.param);
  }
  const common = commonConditions(search, page, () => "?");
  where.push(...common.where);
  params.push(...common.params);
  for (const w of search.where ?? []) {
    const c = whereCondition(w);
    where.push(c.sql);
    params.push(...c.params);
  }
  return { body: `FROM ${from} WHERE ${where.join(" AND ") || "true"}`, order: pageOrder(page), params };
}

/**
 * Runs `fn` in one read transaction (`beginSearch`) with the index's generations: the worker may drop
 * one meanwhile, and the transaction's snapshot keeps the tables it read until it ends.
 */
function reading<T>(q: Sql, fn: (generations: number[]) => T): T {
  const generations = beginSearch(q);
  try {
    return fn(generations);
  } finally {
    endSearch(q);
  }
}

/**
 * Registers on a search connection (the store opened read-only, the index file attached as `search`)
 * the SQL function a search of a non-ASCII term calls.
 */
export function prepareSearchConnection(q: Sql): void {
  q.db.function(holdsFolded, { deterministic: true }, (text, term) =>
    String(text).toLowerCase().includes(String(term)) ? 1 : 0,
  );
}

/**
 * Begins a search's read transaction: reads the index's generations and the events table, so that both
 * files' snapshots are taken now (SQLite takes a file's snapshot at its first read in the transaction).
 * What a search finds is then fixed from here, however long it runs and whatever is written meanwhile.
 * The caller ends it with `endSearch` (`findEvents` runs in between).
 */
export function beginSearch(q: Sql): number[] {
  q.db.exec("BEGIN");
  try {
    const generations = generationsOf(q);
    q.get("SELECT 1 AS one FROM events LIMIT 1", [], () => 1);
    return generations;
  } catch (err) {
    q.db.exec("COMMIT");
    throw err;
  }
}

export function endSearch(q: Sql): void {
  if (q.db.isTransaction) q.db.exec("COMMIT");
}

/**
 * A page cut at `maxBytes` of event JSON: the matches' rowids and sizes first (octet_length reads a
 * row's header, not its text), then those rows that fit, by rowid, in the same read transaction.
 */
function rowsFitting(
  q: Sql,
  body: string,
  order: string,
  params: SQLInputValue[],
  limit: number,
  maxBytes: number,
) {
  const sized = q.all(
    `SELECT e.rowid AS r, octet_length(e.event_json) AS n ${body} ${order} LIMIT ?`,
    [...params, limit],
    (r) => ({ rowid: Number(r.r), n: Number(r.n) }),
  );
  const rowids = sized
    .slice(
      0,
      rowsWithin(
        sized.map((s) => s.n),
        maxBytes,
      ),
    )
    .map((s) => s.rowid);
  return q.all(
    `SELECT e.* FROM events e WHERE e.rowid IN (SELECT value FROM json_each(?)) ${order}`,
    [JSON.stringify(rowids)],
    toEvent,
  );
}

/** A search's page and, when asked, the count of every match, in the transaction `beginSearch` began. */
export function findEvents(
  q: Sql,
  search: EventSearch,
  page: EventSearchPage,
  generations: number[],
): EventSearchResult {
  const { body, order, params } = searchQuery(search, page, generations);
  let items =
    page.maxBytes === undefined
      ? q.all(`SELECT e.* ${body} ${order} LIMIT ?`, [...params, page.limit], toEvent)
      : rowsFitting(q, body, order, params, page.limit, page.maxBytes);
  if (page.before) items = items.reverse();
  // Every match counts, whichever page this is.
  const all = page.count ? searchQuery(search, { limit: 0 }, generations) : undefined;
  const totalCount = all ? q.count(`SELECT count(*) AS n ${all.body}`, all.params) : -1;
  return { items, totalCount };
}

/**
 * The search's operations on the driver's reader connection, run on the event loop under the store's
 * lock: what a transaction's own `searchEvents` and `explainEventSearch` use. The store's own
 * `searchEvents` runs on a search thread instead (search-threads.ts), so that a long search never
 * holds up the server.
 */
export function eventSearchOps(q: Sql, settle: () => Promise<void>): EventSearchOps {
  prepareSearchConnection(q);
  return {
    searchEvents: async (search, page) => {
      await settle();
      return reading(q, (generations) => findEvents(q, search, page, generations));
    },

    explainEventSearch: async (search, page) =>
      reading(q, (generations) => {
        const { body, order, params } = searchQuery(search, page, generations);
        const rows = q.db
          .prepare(`EXPLAIN QUERY PLAN SELECT e.* ${body} ${order} LIMIT ?`)
          .all(...params, page.limit) as Array<{ detail: string }>;
        return rows.map((r) => r.detail).join("\n");
      }),
  };
}
