/**
 * Human output of the CLI: tables like pd's, timestamps, JSON, and the one sanitizer that every text
 * from elsewhere (events and their headers, logs, errors, names, a receiver's answer, the server's
 * messages) passes before it reaches a terminal, so that none of its escape sequences is obeyed there.
 */

// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it finds
const controls = /\r?\n|[\x00-\x08\x0b-\x1f\x7f-\x9f]/g;
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it finds
const jsonControls = /[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]/g;
const hex = (c: string) => c.charCodeAt(0).toString(16).padStart(2, "0");

/**
 * `text` made safe to print: C0 controls (ESC, CR, BEL…), DEL and the C1 controls U+0080–U+009F (CSI
 * and OSC of 8-bit terminals) shown as `\x1b`-style escapes, so that a terminal prints them rather
 * than moving the cursor, setting the title or the clipboard, or opening links. A tab stays; a newline
 * stays with `lines` (a block meant to span lines: a stack, a body) and is shown as `\n` otherwise.
 * Applied before the CLI's own colours, which it would show as escapes too.
 */
export function printable(text: string, { lines = false }: { lines?: boolean } = {}): string {
  return text.replace(controls, (c) => {
    if (c.endsWith("\n")) return lines ? "\n" : "\\n";
    return `\\x${hex(c)}`;
  });
}

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
  return printable(text.replace(/[\r\n\t]+/g, " "));
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

/**
 * `value` as JSON (indented, or on one line with `indent` 0), with DEL and the C1 controls escaped as
 * `\u0080`-style escapes, which JSON.stringify leaves raw: the same JSON to a parser, nothing a
 * terminal obeys.
 */
export function formatJson(value: unknown, indent = 2): string {
  return escapeJsonControls(JSON.stringify(value, null, indent) ?? "null");
}

/**
 * JSON text (or NDJSON) with raw control characters other than tab, newline and carriage return (which
 * may only stand inside strings, where `\u00XX` means the same) escaped.
 */
export function escapeJsonControls(json: string): string {
  return json.replace(jsonControls, (c) => `\\u00${hex(c)}`);
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
  const text = typeof code === "string" ? `${where}${e.message} (${code})` : `${where}${e.message}`;
  return printable(text, { lines: true });
}
