/**
 * The event search (docs/streams.md, "Searching events"): what a search asks of the store, and the
 * conditions both drivers write alike (which emitters, channel, time, cursor, delivery outcome). Each
 * driver adds its own for the text (`q`: FTS5 on SQLite, pg_trgm on PostgreSQL) and for JSON paths
 * (`where`) in its `event-search.ts`, and differs here only in how a parameter is written.
 */
import type { DeliveryStatus, EventRecord } from "../domain/types.ts";

/** One `where` condition: the value at a path of the event's JSON (object keys, outermost first). */
export interface EventWhere {
  path: string[];
  value: string;
}

/** Which stored events a search matches. */
export interface EventSearch {
  /** One emitter's events… */
  emitterId?: string;
  /** …or those of every source these accounts own (the cross-source search); one of the two is given. */
  sourceOwnerIds?: string[];
  channel: string;
  /**
   * Each must occur in the event's stored JSON text, case-insensitively; at least one has 3 characters
   * or more (the text index finds the candidates by those; shorter ones are checked on each candidate).
   */
  text?: string[];
  /** Each path's value must equal its value (as a string, or as the number, boolean or null it spells). */
  where?: EventWhere[];
  /** Events at or after this time (epoch ms), by their ID. */
  sinceMs?: number;
  /** Events before this time (epoch ms), by their ID. */
  untilMs?: number;
  /** With `emitterId`: only events past this one, the window's cut (what retention keeps; `withinWindow`). */
  newerThan?: { ms: number; seq: number };
  /** Only events with a delivery in this status whose subscription (or replay) one of `ownerIds` owns. */
  delivery?: { status: DeliveryStatus; ownerIds: string[] };
}

/** A position in a search's order (event time, sequence, then emitter, newest first). */
export interface EventKey {
  ms: number;
  seq: number;
  emitterId: string;
}

/** A page of a search, newest first. */
export interface EventSearchPage {
  limit: number;
  /** Events older than this one. */
  after?: EventKey;
  /** Events newer than this one (the nearest `limit` above it). */
  before?: EventKey;
  /** Count every matching event too (`totalCount`); -1 when not asked. */
  count?: boolean;
  /** Bytes of event JSON the page may hold, as `EventQuery.maxBytes`. */
  maxBytes?: number;
}

/**
 * How many of a page's rows, whose event JSON is `sizes` bytes each in order, fit in `maxBytes`: at
 * least one, so that a page always moves on. What `maxBytes` cuts a page at, in both drivers.
 */
export function rowsWithin(sizes: readonly number[], maxBytes: number): number {
  let total = 0;
  for (const [i, n] of sizes.entries()) {
    total += n;
    if (total > maxBytes) return Math.max(1, i);
  }
  return sizes.length;
}

/** The events a search finds, newest first, and how many match in all (-1 unless counted). */
export interface EventSearchResult {
  items: EventRecord[];
  totalCount: number;
}

/** Whether a search asks anything beyond a channel's events (otherwise a plain list serves it). */
export function isFiltered(s: EventSearch): boolean {
  return (
    (s.text?.length ?? 0) > 0 ||
    (s.where?.length ?? 0) > 0 ||
    s.sinceMs !== undefined ||
    s.untilMs !== undefined ||
    s.delivery !== undefined ||
    s.emitterId === undefined
  );
}

/** A JSON number as text: `where` matches such a value as a number too. */
const jsonNumber = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?$/;

/** The JSON values a `where` value stands for: the string itself, and the number, boolean or null it spells. */
export function whereValues(value: string): unknown[] {
  const values: unknown[] = [value];
  if (jsonNumber.test(value) && Number.isFinite(Number(value))) values.push(Number(value));
  if (value === "true" || value === "false") values.push(value === "true");
  if (value === "null") values.push(null);
  return values;
}

/**
 * The characters of the unit both stores index text by (SQLite's FTS5 trigram tokenizer, PostgreSQL's
 * pg_trgm): a shorter text matches through no entry of either index.
 */
export const trigramChars = 3;

/**
 * Characters of an event's JSON text that go into either store's text index: its first 64 Ki, so that a
 * search finds the words of the first 64 KiB or so of every event, and no more. Indexing costs grow with
 * the text: about 80 ms a MiB of random words for SQLite's tokenizer (a tenant's 2,000 events of 1 MiB
 * each cost 160 s of its worker, which every search waited for), and 0.7 to 1.1 s a MiB for PostgreSQL's
 * trigram GIN index, in the commit that stores the event. docs/streams.md, "Searching events".
 */
export const indexedChars = 65_536;

/**
 * The texts an event's JSON holds when `w` matches, one for each JSON value its value spells (any one
 * will do, each given with its value): the path's last key and the value side by side, as JSON.stringify writes them (`"id":42`,
 * `"id":"42"`, `"x-github-event":"push"`). Every stored event is its JSON.stringify text (rows.ts), so an
 * event holding the value at the path holds one of them, and each store's trigram index finds the
 * candidates of a `where` by them, even for a value too short to be a word of its own; the JSON
 * functions then decide.
 */
export function whereNeedles(w: EventWhere): Array<{ value: unknown; text: string }> {
  const key = JSON.stringify(w.path[w.path.length - 1]);
  return whereValues(w.value).map((value) => ({ value, text: `${key}:${JSON.stringify(value)}` }));
}

/**
 * The value of `w` as a word the event's JSON text holds as it is, when it is one: 3 characters or more
 * that JSON writes without escapes, and, for a value that also spells a number, the number's own
 * spelling (`42`, not `42.0`, which JSON writes `42`). Such a word alone finds a `where`'s candidates
 * through the trigram indexes with fewer, rarer trigrams than its needles (a value shared by 1 in 5,000
 * of 1,000,000 events: p95 21.5 ms on SQLite against 37.7 with the needles); a shorter value goes by its
 * needles (`whereNeedles`).
 */
export function whereWord(w: EventWhere): string | undefined {
  const v = w.value;
  if ([...v].length < trigramChars || JSON.stringify(v) !== `"${v}"`) return undefined;
  const spellsNumber = whereValues(v).some((x) => typeof x === "number");
  return spellsNumber && String(Number(v)) !== v ? undefined : v;
}

/**
 * The conditions on the events table (aliased `e`) that both drivers write alike, and their parameters;
 * `placeholder(n)` writes the n-th parameter (from 1), `first` being the number of parameters before them,
 * and `inSet(subquery)` how an emitter is matched against the IDs a subquery gives (`IN (…)` by default).
 */
export function commonConditions(
  s: EventSearch,
  page: Pick<EventSearchPage, "after" | "before">,
  placeholder: (n: number) => string,
  first = 0,
  inSet: (subquery: string) => string = (subquery) => `IN (${subquery})`,
): { where: string[]; params: Array<string | number> } {
  const params: Array<string | number> = [];
  const where: string[] = [];
  const p = (value: string | number) => {
    params.push(value);
    return placeholder(first + params.length);
  };
  const list = (values: string[]) => (values.length === 0 ? "NULL" : values.map(p).join(", "));
  if (s.emitterId !== undefined) where.push(`e.emitter_id = ${p(s.emitterId)}`);
  else if (s.sourceOwnerIds)
    where.push(
      `e.emitter_id ${inSet(`SELECT id FROM sources WHERE owner_id IN (${list(s.sourceOwnerIds)})`)}`,
    );
  else throw new Error("an event search names an emitter or the owners of its sources");
  where.push(`e.channel = ${p(s.channel)}`);
  if (s.sinceMs !== undefined) where.push(`e.id_ms >= ${p(s.sinceMs)}`);
  if (s.untilMs !== undefined) where.push(`e.id_ms < ${p(s.untilMs)}`);
  if (s.newerThan) where.push(`(e.id_ms, e.id_seq) > (${p(s.newerThan.ms)}, ${p(s.newerThan.seq)})`);
  if (page.after)
    where.push(
      `(e.id_ms, e.id_seq, e.emitter_id) < (${p(page.after.ms)}, ${p(page.after.seq)}, ${p(page.after.emitterId)})`,
    );
  if (page.before)
    where.push(
      `(e.id_ms, e.id_seq, e.emitter_id) > (${p(page.before.ms)}, ${p(page.before.seq)}, ${p(page.before.emitterId)})`,
    );
  if (s.delivery)
    where.push(
      `EXISTS (SELECT 1 FROM deliveries d WHERE d.emitter_id = e.emitter_id AND d.event_id = e.id AND d.status = ${p(s.delivery.status)} AND d.owner_id IN (${list(s.delivery.ownerIds)}))`,
    );
  return { where, params };
}

/** The ORDER BY and LIMIT of a page: newest first, or toward newer items from `before` (reversed after). */
export function pageOrder(page: EventSearchPage): string {
  const dir = page.before ? "ASC" : "DESC";
  return `ORDER BY e.id_ms ${dir}, e.id_seq ${dir}, e.emitter_id ${dir}`;
}
