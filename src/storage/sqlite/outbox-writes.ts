/**
 * The outbox's writes of a group commit, held back and made together just before COMMIT: the
 * deliveries routing creates as one multi-row INSERT, the settlements of the attempts that ended as one
 * UPDATE … FROM a VALUES list, with each delivery's first attempt in its own row (migration 023), and the
 * later attempts' rows as one INSERT (per chunk of up to 64). Made one statement per delivery, they cost
 * most of a delivered event's SQLite time (issue 29). Outside a
 * transaction each write is made at once. Any other operation that may read or change deliveries makes
 * the held writes first (`driver.ts`), so nothing inside the transaction sees the difference.
 */
import type { SQLInputValue } from "node:sqlite";
import type { Delivery, DeliveryAttempt } from "../../domain/types.ts";
import { attemptColumnNames, attemptRowValues, firstAttemptText } from "../attempt-rows.ts";
import type { DeliveryPatch } from "../port.ts";
import { deliveryPatchParams, deliveryRowValues } from "../rows.ts";
import { textsBySize } from "../texts-by-size.ts";
import type { Sql } from "./sql.ts";

/** True when the listener `listener` (a column or `?`) is a webhook or source made inactive. */
export const listenerInactive = (listener: string) =>
  `(EXISTS (SELECT 1 FROM webhooks w WHERE w.id = ${listener} AND w.active = 0)
    OR EXISTS (SELECT 1 FROM sources s WHERE s.id = ${listener} AND s.active = 0))`;

/**
 * Pending deliveries of an inactive listener are parked: no due time, so they stay out of the index
 * that claims walk (a claim then never steps over the backlog of a webhook that a 410 disabled). This
 * expression gives the due time `due` unless it is NULL already or the row's listener is inactive (a
 * settled delivery has none, and needs no look at its listener).
 */
const dueUnlessParked = (listener: string, due: string) =>
  `CASE WHEN ${due} IS NULL OR ${listenerInactive(listener)} THEN NULL ELSE ${due} END`;

const deliveryColumns = `id, owner_id, subscription_id, emitter_id, event_id, channel, listener_id, listener_kind,
  event_json, meta_json, indexed_at_ms, hops, status, attempts, round_attempts, next_attempt_ms,
  last_status_code, last_error, last_duration_ms, claimed_by, created_ms, updated_ms, claimed_until, trace_context`;
/** Position of `next_attempt_ms` in `deliveryRowValues`. */
const dueColumn = 15;
/** A delivery's VALUES tuple: the due time is bound twice and the listener's ID twice, for the parking test. */
const deliveryTuple = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, CASE WHEN ? IS NULL OR ${listenerInactive("?")} THEN NULL ELSE ? END, ?, ?, ?, ?, ?, ?, ?, ?)`;

/** Rows per statement: chunks of these sizes, largest first, so that each kind has four statement texts (`textsBySize`). */
const chunkSizes = [64, 16, 4, 1];

/** `n` copies of `tuple`, comma-separated. */
const tuples = (tuple: string, n: number): string => Array.from({ length: n }, () => tuple).join(", ");

/** The multi-row INSERT of `n` deliveries. */
const insertText = textsBySize(
  (n) => `INSERT INTO deliveries (${deliveryColumns}) VALUES ${tuples(deliveryTuple, n)}`,
);

/**
 * The UPDATE of `n` settlements, with `deliveryPatchParams` rows and the first attempt's text (or NULL).
 * A first attempt already kept stays: only a second node sending the same delivery after its lease ran
 * out could bring another, and the one stored first is the one the attempts' table kept before.
 */
const settleText = textsBySize((n) => {
  const list = tuples("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", n);
  return `WITH v(status, attempts, round_attempts, next_attempt_ms, last_status_code, last_error, last_duration_ms, updated_ms, id, first_attempt)
    AS (VALUES ${list})
    UPDATE deliveries AS d SET status = v.status, attempts = v.attempts, round_attempts = v.round_attempts,
      next_attempt_ms = ${dueUnlessParked("d.listener_id", "v.next_attempt_ms")}, last_status_code = v.last_status_code,
      last_error = v.last_error, last_duration_ms = v.last_duration_ms, updated_ms = v.updated_ms,
      claimed_by = NULL, claimed_until = NULL, first_attempt = coalesce(d.first_attempt, v.first_attempt)
    FROM v WHERE d.id = v.id`;
});

/** The INSERT of `n` attempts, each kept only if its delivery still exists (it may have been deleted). */
const attemptText = textsBySize((n) => {
  const tuple = `(${attemptColumnNames.map(() => "?").join(", ")})`;
  return `WITH v(${attemptColumnNames.join(", ")}) AS (VALUES ${tuples(tuple, n)})
    INSERT INTO delivery_attempts (${attemptColumnNames.join(", ")})
    SELECT * FROM v WHERE EXISTS (SELECT 1 FROM deliveries d WHERE d.id = v.delivery_id)`;
});

/** The bound values of a delivery's tuple in `insertText`. */
function deliveryParams(d: Delivery): SQLInputValue[] {
  const values = deliveryRowValues(d);
  const due = values[dueColumn]!;
  values.splice(dueColumn, 1, due, d.listenerId, d.listenerId, due);
  return values;
}

/** Runs `text(n)` over `rows` in chunks of `chunkSizes`, each chunk's rows' values in order. */
function writeChunked<T>(
  q: Sql,
  rows: readonly T[],
  text: (n: number) => string,
  params: (row: T) => SQLInputValue[],
): void {
  let i = 0;
  for (const size of chunkSizes) {
    while (rows.length - i >= size) {
      const values: SQLInputValue[] = [];
      for (let j = i; j < i + size; j++) values.push(...params(rows[j]!));
      q.run(text(size), values);
      i += size;
    }
  }
}

/** The outbox writes of the open transaction (one per connection). */
export class OutboxWrites {
  readonly #q: Sql;
  #holding = false;
  #inserts: Delivery[] = [];
  #settles: Array<{ id: string; patch: DeliveryPatch; first: string | null }> = [];
  #attempts: DeliveryAttempt[] = [];
  /** Deliveries with a settlement held: a second one for the same delivery makes the first now. */
  readonly #settling = new Set<string>();

  constructor(q: Sql) {
    this.#q = q;
  }

  /** A transaction began: hold the outbox writes until `end`. */
  start(): void {
    this.#holding = true;
  }

  /** The transaction ends: make the held writes (before COMMIT) or, with `discard`, drop them. */
  end(discard = false): void {
    if (discard) this.#clear();
    else this.settle();
    this.#holding = false;
  }

  /** Makes the held writes now and keeps holding (an operation that reads deliveries comes next). */
  settle(): void {
    if (this.#inserts.length === 0 && this.#settles.length === 0) return;
    if (this.#inserts.length > 0) writeChunked(this.#q, this.#inserts, insertText, deliveryParams);
    if (this.#settles.length > 0)
      writeChunked(this.#q, this.#settles, settleText, (s) => {
        const values: SQLInputValue[] = deliveryPatchParams(s.id, s.patch);
        values.push(s.first);
        return values;
      });
    if (this.#attempts.length > 0) writeChunked(this.#q, this.#attempts, attemptText, attemptRowValues);
    this.#clear();
  }

  #clear(): void {
    this.#inserts = [];
    this.#settles = [];
    this.#attempts = [];
    this.#settling.clear();
  }

  /** New deliveries, written in the order given (their `seq` orders a subscription's deliveries). */
  insert(deliveries: readonly Delivery[]): void {
    this.#inserts.push(...deliveries);
    if (!this.#holding) this.settle();
  }

  /**
   * An attempt's result, and its attempt if one was made (kept only if the delivery still exists): the
   * first in the delivery's row, a later one as a row of `delivery_attempts`.
   */
  settleDelivery(id: string, patch: DeliveryPatch, attempt: DeliveryAttempt | undefined): void {
    if (this.#settling.has(id)) this.settle();
    this.#settling.add(id);
    const first = attempt?.n === 1 ? firstAttemptText(attempt) : null;
    this.#settles.push({ id, patch, first });
    if (attempt && first === null) this.#attempts.push(attempt);
    if (!this.#holding) this.settle();
  }
}
