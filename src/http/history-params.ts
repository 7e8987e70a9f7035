/**
 * Parameters of the history routes (deliveries filters, replay): a time as epoch milliseconds or ISO
 * 8601, and an HTTP status code or class (`503`, `5xx`). Parsed here so that every route reads them
 * alike and a bad value is a 400 naming its field.
 */
import { Type } from "typebox";
import { maxTimeMs } from "../clock.ts";
import { invalidParameter } from "../errors.ts";

/**
 * Schema of a time parameter: epoch ms, or an ISO 8601 date or date-time. A time past `maxTimeMs` (year
 * 275760) is a 400, never a number SQL cannot bind.
 */
export const timeParam = (description: string) =>
  Type.Union([Type.Integer({ minimum: 0, maximum: maxTimeMs }), Type.String({ maxLength: 40 })], {
    description: `${description}: epoch milliseconds or ISO 8601 (2026-11-22, 2026-11-22T21:40:00Z)`,
  });

/** Epoch ms of a time parameter; undefined when absent, a 400 naming `field` when it is neither form. */
export function parseTime(value: string | number | undefined, field: string): number | undefined {
  if (value === undefined) return undefined;
  const text = typeof value === "number" ? String(value) : value.trim();
  const ms = /^\d{1,16}$/.test(text)
    ? Number(text)
    : /^\d{4}-\d{2}-\d{2}/.test(text)
      ? Date.parse(text)
      : Number.NaN;
  if (Number.isNaN(ms) || ms > maxTimeMs)
    throw invalidParameter(field, `${field} must be epoch milliseconds or an ISO 8601 date or date-time`);
  return ms;
}

/** Schema of a status code filter. */
export const statusCodeParam = Type.String({
  pattern: "^([1-5][0-9]{2}|[1-5]xx)$",
  description: "The last attempt's HTTP status: a code (503) or a class (5xx)",
});

/** The inclusive range of a status code filter (`503`, `5xx`). */
export function parseStatusCode(value: string | undefined): { min: number; max: number } | undefined {
  if (value === undefined) return undefined;
  if (value.endsWith("xx")) {
    const first = Number(value[0]) * 100;
    return { min: first, max: first + 99 };
  }
  const code = Number(value);
  return { min: code, max: code };
}
