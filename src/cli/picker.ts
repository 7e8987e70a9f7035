/**
 * A list to pick one item from on a terminal, as `pd deploy` offers the registry: type to filter, ↑/↓
 * to move, Enter to choose, Esc or Ctrl-C to give up. Drawn on stderr, so stdout stays the command's.
 */
import { emitKeypressEvents } from "node:readline";
import type { Io } from "./command.ts";
import { printable } from "./output.ts";
import type { Painter } from "./terminal.ts";

/** One item of the list. */
export interface Choice {
  label: string;
  /** Shown dimmed after the label, and searched too. */
  detail?: string;
  value: string;
}

/** Rows of the list shown at once; the window follows the cursor. */
const rows = 10;

/** The choices whose label or detail holds every word of `filter`, in order. */
export function filterChoices(choices: Choice[], filter: string): Choice[] {
  const words = filter.toLowerCase().split(/\s+/).filter(Boolean);
  return choices.filter((c) => {
    const text = `${c.label} ${c.detail ?? ""}`.toLowerCase();
    return words.every((w) => text.includes(w));
  });
}

interface Key {
  name?: string;
  ctrl?: boolean;
  meta?: boolean;
}

/**
 * Lets the person pick one of `choices`; resolves to it, or undefined when they give up. Labels and
 * details (names the server gave) are shown with their control characters as escapes.
 */
export function pick(io: Io, title: string, given: Choice[], paint: Painter): Promise<Choice | undefined> {
  const choices = given.map((c) => ({
    ...c,
    label: printable(c.label),
    detail: c.detail === undefined ? undefined : printable(c.detail),
  }));
  const input = io.stdin;
  const out = io.stderr;
  // A terminal that reports no width (0, as some emulated ones do) gets the classic 80 columns.
  const width = Math.max(20, ((out as { columns?: number }).columns || 80) - 1);
  const fit = (text: string) => (text.length > width ? `${text.slice(0, width - 1)}…` : text);
  let filter = "";
  let index = 0;
  let drawn = 0;

  const erase = () => {
    if (drawn > 1) out.write(`\x1b[${drawn - 1}A`);
    out.write("\r\x1b[0J");
  };
  const draw = () => {
    const shown = filterChoices(choices, filter);
    index = Math.min(index, Math.max(0, shown.length - 1));
    const start = Math.min(Math.max(0, index - rows + 1), Math.max(0, shown.length - rows));
    const lines = [
      `${paint("bold", title)} ${paint("dim", "(type to filter, ↑↓ to move, Enter to choose, Esc to cancel)")}`,
      `> ${printable(filter)}`,
      ...shown.slice(start, start + rows).map((c, i) => {
        const text = fit(`${c.label}${c.detail ? `  ${c.detail}` : ""}`);
        const label = text.slice(0, c.label.length);
        const rest = paint("dim", text.slice(c.label.length));
        return start + i === index
          ? `${paint("cyan", "❯")} ${paint("cyan", label)}${rest}`
          : `  ${label}${rest}`;
      }),
    ];
    if (shown.length === 0) lines.push(paint("dim", "  (nothing matches)"));
    else if (shown.length > rows) lines.push(paint("dim", `  ${shown.length} in all`));
    erase();
    out.write(lines.join("\n"));
    drawn = lines.length;
    return shown;
  };

  return new Promise((resolve) => {
    emitKeypressEvents(input);
    input.setRawMode?.(true);
    input.resume();
    let shown = draw();
    const finish = (choice: Choice | undefined) => {
      input.off("keypress", onKey);
      input.setRawMode?.(false);
      input.pause();
      erase();
      out.write(choice ? `${paint("bold", title)} ${choice.label}\n` : "");
      resolve(choice);
    };
    const onKey = (text: string | undefined, key: Key = {}) => {
      if ((key.ctrl && (key.name === "c" || key.name === "d")) || key.name === "escape")
        return finish(undefined);
      if (key.name === "return" || key.name === "enter") {
        if (shown[index]) finish(shown[index]);
        return;
      }
      if (key.name === "up") index = Math.max(0, index - 1);
      else if (key.name === "down") index = Math.min(shown.length - 1, index + 1);
      else if (key.name === "backspace") filter = filter.slice(0, -1);
      else if (text && !key.ctrl && !key.meta && text >= " ") {
        filter += text;
        index = 0;
      } else return;
      shown = draw();
    };
    input.on("keypress", onKey);
  });
}
