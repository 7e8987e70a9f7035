/**
 * A delivery attempt's row, shared by both drivers: the columns in the order their INSERTs bind them,
 * the values of an attempt in that order, and what migration 012 added read back as its `detail`
 * (docs/delivery.md, "Attempts"). Both drivers store the flag as 0/1 (PostgreSQL casts it to boolean).
 */
import type { AttemptDetail, AttemptErrorKind, DeliveryAttempt } from "../domain/types.ts";

/** Row as either driver returns it. */
type Row = Record<string, unknown>;

/** The columns of `delivery_attempts`, in `attemptRowValues` order. */
export const attemptColumnNames = [
  "delivery_id",
  "n",
  "started_ms",
  "duration_ms",
  "status_code",
  "error",
  "response",
  "outcome",
  "url",
  "request_headers",
  "response_headers",
  "response_truncated",
  "error_kind",
] as const;

/**
 * The columns an attempts read selects: all, or with `responseChars` only the start of each answer's
 * body (the lists show 512 characters of answers kept up to 64 KB, and need not read the rest).
 */
export function attemptSelect(responseChars?: number): string {
  if (responseChars === undefined) return attemptColumnNames.join(", ");
  const n = Math.max(0, Math.floor(responseChars));
  return attemptColumnNames
    .map((c) => (c === "response" ? `substr(response, 1, ${n}) AS response` : c))
    .join(", ");
}

/**
 * An attempt's values after `delivery_id` and `n`, in `attemptColumnNames` order, with the request's and
 * answer's headers as `headers` makes them (JSON text for a row's columns, the objects themselves inside
 * `firstAttemptText`'s array).
 */
function attemptValues<H>(a: DeliveryAttempt, headers: (h: object) => H): Array<string | number | H | null> {
  const d = a.detail;
  return [
    a.startedMs,
    a.durationMs,
    a.statusCode,
    a.error,
    a.response,
    a.outcome,
    d?.url ?? null,
    d?.requestHeaders ? headers(d.requestHeaders) : null,
    d?.responseHeaders ? headers(d.responseHeaders) : null,
    d ? (d.responseTruncated ? 1 : 0) : null,
    d?.errorKind ?? null,
  ];
}

/** The values of an attempt's row, in `attemptColumnNames` order. */
export function attemptRowValues(a: DeliveryAttempt): Array<string | number | null> {
  return [a.deliveryId, a.n, ...attemptValues(a, (h) => JSON.stringify(h))];
}

/**
 * A first attempt kept in its delivery's row (`deliveries.first_attempt`, migration 023 of each driver):
 * the values of `attemptRowValues` less `delivery_id` and `n`, as one JSON array, the request's and
 * answer's headers as objects in it. `firstAttemptSelect` of each driver reads it back under the
 * columns' names, so that both kinds of attempt map alike.
 */
export function firstAttemptText(a: DeliveryAttempt): string {
  return JSON.stringify(attemptValues(a, (h) => h));
}

/** The columns of `firstAttemptText`'s array, in its order. */
const firstAttemptColumnNames = attemptColumnNames.slice(2);

/**
 * The first attempts kept in their deliveries' rows (migration 023 of each driver), selected from
 * `deliveries` as rows of `delivery_attempts` (with `responseChars`, only the start of each answer's
 * body, as `attemptSelect`). `element` is the driver's expression of the array's item `i`, typed as
 * column `column`.
 */
export function firstAttemptSelect(
  element: (i: number, column: string) => string,
  responseChars?: number,
): string {
  const columns = firstAttemptColumnNames.map((c, i) => {
    if (c === "response" && responseChars !== undefined)
      return `substr(${element(i, c)}, 1, ${Math.max(0, Math.floor(responseChars))}) AS response`;
    return `${element(i, c)} AS ${c}`;
  });
  return `id AS delivery_id, 1 AS n, ${columns.join(", ")}`;
}

const json = <T>(value: unknown): T | null => (typeof value === "string" ? (JSON.parse(value) as T) : null);

/**
 * What migration 012 added to an attempt's row, or undefined for an attempt stored before it (all its
 * columns are null then: `response_truncated` is written with every attempt since).
 */
export function toAttemptDetail(r: Row): AttemptDetail | undefined {
  if (r.response_truncated === null || r.response_truncated === undefined) return undefined;
  return {
    url: (r.url as string | null) ?? null,
    requestHeaders: json(r.request_headers),
    responseHeaders: json(r.response_headers),
    responseTruncated: r.response_truncated === true || r.response_truncated === 1,
    errorKind: (r.error_kind as AttemptErrorKind | null) ?? null,
  };
}
