/** Figures of a bench run, their targets, and the printed table. */
import { round } from "./stats.ts";

/** A target from the issues: the figure must be at least (`>=`) or at most (`<=`) `value`. */
export interface Target {
  op: ">=" | "<=";
  value: number;
}

/** One printed line: a measured figure, with its target when the issues set one. */
export interface Figure {
  part: string;
  name: string;
  /** NaN when the part failed before measuring it. */
  value: number;
  unit: string;
  target?: Target;
  /** PASS/MISS against the target; INFO without one; FAIL when the figure could not be measured. */
  verdict: "PASS" | "MISS" | "INFO" | "FAIL";
  note?: string;
}

export function figure(
  part: string,
  name: string,
  value: number,
  unit: string,
  target?: Target,
  note?: string,
): Figure {
  let verdict: Figure["verdict"] = "INFO";
  if (!Number.isFinite(value)) verdict = "FAIL";
  else if (target) {
    verdict = (target.op === ">=" ? value >= target.value : value <= target.value) ? "PASS" : "MISS";
  }
  return { part, name, value: round(value), unit, target, verdict, note };
}

/** What a part hands back: its figures, the raw details for --json, and its error if it failed. */
export interface PartResult {
  part: string;
  figures: Figure[];
  details: Record<string, unknown>;
  error?: string;
  seconds: number;
}

function formatValue(f: Figure): string {
  if (!Number.isFinite(f.value)) return "—";
  const text = f.value.toLocaleString("en-US", { maximumFractionDigits: 2 });
  return f.unit ? `${text} ${f.unit}` : text;
}

function formatTarget(f: Figure): string {
  if (!f.target) return "";
  const v = f.target.value.toLocaleString("en-US");
  return `${f.target.op === ">=" ? "≥" : "≤"} ${v}${f.unit ? ` ${f.unit}` : ""}`;
}

/** The fixed-width table: part, figure, value, target, verdict, note. */
export function table(parts: PartResult[]): string {
  const rows: string[][] = [["Part", "Figure", "Value", "Target", "Result", "Note"]];
  for (const p of parts) {
    for (const f of p.figures) {
      rows.push([f.part, f.name, formatValue(f), formatTarget(f), f.verdict, f.note ?? ""]);
    }
    if (p.error) rows.push([p.part, "ERROR", "—", "", "FAIL", p.error.replace(/\s+/g, " ").slice(0, 160)]);
  }
  const widths = rows[0].map((_, i) =>
    Math.max(...rows.filter((r) => i < 5 || r === rows[0]).map((r) => (r[i] ?? "").length)),
  );
  const line = (r: string[]) =>
    r
      .map((cell, i) =>
        i === 2 ? cell.padStart(widths[i]) : i === r.length - 1 ? cell : cell.padEnd(widths[i]),
      )
      .join("  ")
      .trimEnd();
  const out = [line(rows[0]), line(widths.map((w) => "-".repeat(w)))];
  let last = "";
  for (const r of rows.slice(1)) {
    if (last && r[0] !== last) out.push("");
    last = r[0];
    out.push(line(r));
  }
  return out.join("\n");
}
