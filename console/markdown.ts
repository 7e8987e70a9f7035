/**
 * The little Markdown that component and prop descriptions use (Pipedream's registry writes them in it):
 * paragraphs, bullet lists, `code`, *emphasis*, **strong**, [links](https://…) and <https://…>. It
 * parses into a tree of plain records that the console renders as elements with text children, so no
 * text of a description ever becomes markup: there is no HTML in the output, raw HTML in the input stays
 * text, and a link keeps only an http, https or mailto address (`javascript:` and the rest lose the link
 * and keep their words). Pure, so that Node tests it with hostile input (test/console/markdown.test.ts).
 */

/** A run of text inside a paragraph or list item. */
export type Inline =
  | { kind: "text"; text: string }
  | { kind: "code"; text: string }
  | { kind: "em"; children: Inline[] }
  | { kind: "strong"; children: Inline[] }
  | { kind: "link"; href: string; children: Inline[] };

/** A paragraph, or a bullet list whose items hold inline runs. */
export type Block = { kind: "paragraph"; children: Inline[] } | { kind: "list"; items: Inline[][] };

/** Descriptions longer than this are cut: a hostile component must not make the page parse megabytes. */
const maxLength = 20_000;
/**
 * How far an opening `*`, `_` or `[` looks for its closer, and how far a code span looks for its end:
 * bounded so that text full of openers costs linear time, not quadratic (20,000 `*a ` took 21 s unbounded).
 */
const reach = 400;
const codeReach = 4000;
/** Nesting deeper than this is text: no description needs it, and recursion must stay shallow. */
const maxDepth = 6;
const listItem = /^ {0,3}[-*+][ \t]+/;
const punctuation = /[!-/:-@[-`{-~]/;
const wordChar = /[\p{L}\p{N}]/u;

/** The address as a link may carry it: absolute http, https or mailto only; anything else is no link. */
export function safeHref(url: string): string | undefined {
  const trimmed = url.trim();
  // Control characters and spaces inside an address are how `java\tscript:` tricks get past filters.
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the point is to find control characters.
  if (trimmed === "" || /[\u0000-\u0020\u007f]/.test(trimmed)) return undefined;
  let parsed: URL;
  try {
    parsed = new URL(trimmed);
  } catch {
    return undefined;
  }
  return parsed.protocol === "http:" || parsed.protocol === "https:" || parsed.protocol === "mailto:"
    ? parsed.href
    : undefined;
}

/** Blocks of a description: paragraphs split by blank lines, and runs of `- ` lines as lists. */
export function parseMarkdown(source: string): Block[] {
  const lines = source.slice(0, maxLength).replace(/\r\n?/g, "\n").split("\n");
  const blocks: Block[] = [];
  let paragraph: string[] = [];
  let items: string[][] | undefined;
  const flush = () => {
    if (paragraph.length) blocks.push({ kind: "paragraph", children: parseInline(paragraph.join("\n")) });
    if (items) blocks.push({ kind: "list", items: items.map((item) => parseInline(item.join("\n"))) });
    paragraph = [];
    items = undefined;
  };
  for (const line of lines) {
    if (line.trim() === "") {
      flush();
    } else if (listItem.test(line)) {
      if (paragraph.length) flush();
      items ??= [];
      items.push([line.replace(listItem, "")]);
    } else if (items && /^\s/.test(line)) {
      // An indented line goes on with the item above it.
      items[items.length - 1]!.push(line.trim());
    } else {
      if (items) flush();
      paragraph.push(line);
    }
  }
  flush();
  return blocks;
}

/** Inline runs of one paragraph; inside a link's words (`inLink`) no further link starts. */
export function parseInline(text: string, inLink = false, depth = 0): Inline[] {
  const out: Inline[] = [];
  let buffer = "";
  const pushText = (s: string) => {
    buffer += s;
  };
  const pushNode = (node: Inline) => {
    if (buffer) out.push({ kind: "text", text: buffer });
    buffer = "";
    out.push(node);
  };
  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    if (c === "\\" && i + 1 < text.length && punctuation.test(text[i + 1]!)) {
      pushText(text[i + 1]!);
      i += 2;
      continue;
    }
    if (c === "`") {
      const run = countRun(text, i, "`");
      const close = findRun(text, i + run, "`", run, i + run + codeReach);
      if (close < 0) {
        pushText("`".repeat(run));
        i += run;
        continue;
      }
      let code = text.slice(i + run, close).replace(/\n/g, " ");
      if (code.length > 2 && code.startsWith(" ") && code.endsWith(" ") && code.trim() !== "")
        code = code.slice(1, -1);
      pushNode({ kind: "code", text: code });
      i = close + run;
      continue;
    }
    if (c === "[" && !inLink && depth < maxDepth) {
      const link = matchLink(text, i);
      if (link) {
        const children = parseInline(link.label, true, depth + 1);
        const href = safeHref(link.url);
        if (href) pushNode({ kind: "link", href, children });
        else for (const child of children) pushNode(child);
        i = link.end;
        continue;
      }
    }
    if (c === "<" && !inLink) {
      const auto = /^<((?:https?:\/\/|mailto:)[^\s<>]+)>/.exec(text.slice(i, i + 2048));
      const href = auto ? safeHref(auto[1]!) : undefined;
      if (auto && href) {
        pushNode({ kind: "link", href, children: [{ kind: "text", text: auto[1]! }] });
        i += auto[0].length;
        continue;
      }
    }
    if (c === "*" || c === "_") {
      const emphasis = depth < maxDepth ? matchEmphasis(text, i, c) : undefined;
      if (emphasis) {
        pushNode({
          kind: emphasis.strong ? "strong" : "em",
          children: parseInline(emphasis.inner, inLink, depth + 1),
        });
        i = emphasis.end;
        continue;
      }
      // A run that opens nothing is text, all of it (so `**` is not retried as two `*`).
      const run = countRun(text, i, c);
      pushText(c.repeat(run));
      i += run;
      continue;
    }
    pushText(c);
    i += 1;
  }
  if (buffer) out.push({ kind: "text", text: buffer });
  return out;
}

function countRun(text: string, at: number, char: string): number {
  let n = 0;
  while (text[at + n] === char) n += 1;
  return n;
}

/** Where the next run of exactly `length` `char`s starts at or after `from` (and before `limit`), or -1. */
function findRun(text: string, from: number, char: string, length: number, limit: number): number {
  let i = text.indexOf(char, from);
  while (i >= 0 && i < limit) {
    const run = countRun(text, i, char);
    if (run === length) return i;
    i = text.indexOf(char, i + run);
  }
  return -1;
}

/** `[label](url)` at `at`: brackets may nest in the label; the address has no spaces; a title is dropped. */
function matchLink(text: string, at: number): { label: string; url: string; end: number } | undefined {
  let depth = 0;
  let close = -1;
  for (let j = at; j < text.length && j < at + reach; j++) {
    const ch = text[j];
    if (ch === "\\") j += 1;
    else if (ch === "[") depth += 1;
    else if (ch === "]" && --depth === 0) {
      close = j;
      break;
    }
  }
  if (close < 0 || text[close + 1] !== "(") return undefined;
  const rest = /^\(\s*<?([^\s<>()]*)>?(?:\s+"[^"]*")?\s*\)/.exec(text.slice(close + 1, close + 2050));
  if (!rest) return undefined;
  return { label: text.slice(at + 1, close), url: rest[1]!, end: close + 1 + rest[0].length };
}

/**
 * `*em*`, `**strong**` (or with `_`) at `at`: the opener is followed and the closer preceded by a
 * non-space, and `_` only counts at word edges, so that `interval_seconds` stays one word.
 */
function matchEmphasis(
  text: string,
  at: number,
  char: "*" | "_",
): { strong: boolean; inner: string; end: number } | undefined {
  const run = countRun(text, at, char);
  if (char === "_" && isWordChar(text[at - 1])) return undefined;
  const limit = Math.min(text.length, at + reach);
  for (const size of run >= 2 ? [2, 1] : [1]) {
    const start = at + size;
    if (start >= text.length || isSpace(text[start])) continue;
    for (let j = start + 1; j < limit; j++) {
      if (text[j] !== char) continue;
      const closes =
        countRun(text, j, char) === size &&
        text[j - 1] !== char &&
        !isSpace(text[j - 1]) &&
        (char === "*" || !isWordChar(text[j + size]));
      if (closes) return { strong: size === 2, inner: text.slice(start, j), end: j + size };
    }
  }
  return undefined;
}

function isSpace(ch: string | undefined): boolean {
  return ch === " " || ch === "\n" || ch === "\t" || ch === "\r" || ch === "\f" || ch === "\v";
}

function isWordChar(ch: string | undefined): boolean {
  return ch !== undefined && wordChar.test(ch);
}
