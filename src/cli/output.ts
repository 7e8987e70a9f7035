/** Human output of the CLI: tables like pd's, timestamps, JSON. */

/** A table column: a header and how to read the cell from a row. */
export interface Column<T> {
  header: string;
  value: (row: T) => unknown;
}

function cell(value: unknown): string {
  if (value === null || value === undefined) return "";
  const text =
    typeof value === "string" ? value : typeof value === "object" ? JSON.stringify(value) : String(value);
  // One line per row, whatever the data holds.
  return text.replace(/[\r\n\t]+/g, " ");
}

/** A box-drawn table; an empty list gives the header alone. */
export function table<T>(rows: T[], columns: Column<T>[]): string {
  const cells = rows.map((row) => columns.map((c) => cell(c.value(row))));
  const widths = columns.map((c, i) => Math.max(c.header.length, ...cells.map((r) => r[i]!.length)));
  const rule = (left: string, mid: string, right: string) =>
    left + widths.map((w) => "─".repeat(w + 2)).join(mid) + right;
  const line = (values: string[]) => `│ ${values.map((v, i) => v.padEnd(widths[i]!)).join(" │ ")} │`;
  return [
    rule("┌", "┬", "┐"),
    line(columns.map((c) => c.header)),
    rule("├", "┼", "┤"),
    ...cells.map(line),
    rule("└", "┴", "┘"),
  ].join("\n");
}

/** Epoch seconds as an ISO date-time in UTC, without milliseconds. */
export function formatTime(epochSeconds: unknown): string {
  if (typeof epochSeconds !== "number" || !Number.isFinite(epochSeconds)) return "";
  return new Date(epochSeconds * 1000).toISOString().replace(/\.\d{3}Z$/, "Z");
}

export function formatJson(value: unknown): string {
  return JSON.stringify(value, null, 2);
}

/** `key: value` lines with the values aligned. */
export function fields(entries: Array<[string, unknown]>): string {
  const width = Math.max(...entries.map(([k]) => k.length)) + 1;
  return entries.map(([k, v]) => `${`${k}:`.padEnd(width)} ${cell(v)}`).join("\n");
}

/**
 * A failure as one line: `message (code)`, led by `file:line:column: ` for a local bundling error
 * (`fount deploy <file>`), whose failing file may be one the component imports (`../../acme.app.mjs`).
 */
export function failureText(e: Error): string {
  const { code, details } = e as Error & { code?: unknown; details?: unknown };
  const d = details as { file?: unknown; line?: unknown; column?: unknown } | undefined;
  const where =
    typeof d?.file === "string" && typeof d.line === "number"
      ? `${d.file}:${d.line}${typeof d.column === "number" ? `:${d.column}` : ""}: `
      : "";
  return typeof code === "string" ? `${where}${e.message} (${code})` : `${where}${e.message}`;
}
