/**
 * The console's Markdown for descriptions (console/markdown.ts): what it renders, and that hostile
 * descriptions come out as text and safe links only. The browser test renders one in the page too.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { type Block, type Inline, parseInline, parseMarkdown, safeHref } from "../../console/markdown.ts";

/** The tree as one line of pseudo-markup, to compare whole results at a glance. */
function show(nodes: Inline[]): string {
  return nodes
    .map((n) => {
      if (n.kind === "text") return n.text;
      if (n.kind === "code") return `<code>${n.text}</code>`;
      if (n.kind === "link") return `<a ${n.href}>${show(n.children)}</a>`;
      return `<${n.kind}>${show(n.children)}</${n.kind}>`;
    })
    .join("");
}

function showBlocks(blocks: Block[]): string[] {
  return blocks.map((b) =>
    b.kind === "paragraph" ? `p: ${show(b.children)}` : `ul: ${b.items.map((i) => show(i)).join(" | ")}`,
  );
}

/** Every text and address in the tree, to check that nothing became anything but text. */
function leaves(nodes: Inline[]): Array<{ kind: string; value: string }> {
  return nodes.flatMap((n) =>
    n.kind === "text" || n.kind === "code"
      ? [{ kind: n.kind, value: n.text }]
      : n.kind === "link"
        ? [{ kind: "href", value: n.href }, ...leaves(n.children)]
        : leaves(n.children),
  );
}

test("backticks, emphasis, strong and links render as the component wrote them", () => {
  assert.equal(
    show(parseInline("The event is the timer event: `{timestamp, interval_seconds}`.")),
    "The event is the timer event: <code>{timestamp, interval_seconds}</code>.",
  );
  assert.equal(
    show(parseInline("**Bold** and *em* and _em too_ and __strong too__")),
    "<strong>Bold</strong> and <em>em</em> and <em>em too</em> and <strong>strong too</strong>",
  );
  assert.equal(
    show(parseInline("[See the docs](https://pipedream.com/docs/) or <https://example.com/a?b=1>")),
    "<a https://pipedream.com/docs/>See the docs</a> or <a https://example.com/a?b=1>https://example.com/a?b=1</a>",
  );
  assert.equal(
    show(parseInline("a [`code` link](https://x.test/)")),
    "a <a https://x.test/><code>code</code> link</a>",
  );
  assert.equal(show(parseInline("``a ` b``")), "<code>a ` b</code>");
  assert.equal(show(parseInline('[docs](https://x.test/ "Title")')), "<a https://x.test/>docs</a>");
  assert.equal(show(parseInline("mail [us](mailto:a@example.com)")), "mail <a mailto:a@example.com>us</a>");
});

test("what only looks like Markdown stays text", () => {
  for (const text of [
    "interval_seconds and snake_case_name",
    "2 * 3 * 4",
    "a ** b",
    "an unclosed `tick",
    "[not a link] (https://x.test/)",
    "[no address]",
    "price: $5 * qty_ordered",
    "\\*not em\\*",
  ]) {
    const nodes = parseInline(text);
    assert.ok(
      nodes.every((n) => n.kind === "text"),
      `${text} → ${show(nodes)}`,
    );
  }
  assert.equal(show(parseInline("\\*not em\\*")), "*not em*");
});

test("paragraphs split at blank lines; dash lines make a list", () => {
  assert.deepEqual(
    showBlocks(parseMarkdown("First line\nsame paragraph.\n\nSecond.\n- one\n- `two`\n  more\nAfter.")),
    ["p: First line\nsame paragraph.", "p: Second.", "ul: one | <code>two</code>\nmore", "p: After."],
  );
  assert.deepEqual(parseMarkdown(""), []);
  assert.deepEqual(parseMarkdown("\r\n\r\n"), []);
});

test("hostile descriptions are text: no markup, no script address, no way out of a code span", () => {
  const hostile = [
    `<img src=x onerror="window.__pwned=1">`,
    `<script>window.__pwned=1</script>`,
    `[click](javascript:window.__pwned=1)`,
    `[click](JaVaScRiPt:alert(1))`,
    `[click](java\tscript:alert(1))`,
    `[click]( javascript:alert(1))`,
    `[click](data:text/html,<script>alert(1)</script>)`,
    `[click](vbscript:msgbox(1))`,
    `[click](//evil.example/)`,
    `[click](/relative)`,
    `<javascript:alert(1)>`,
    `**<b onmouseover=alert(1)>bold</b>**`,
    "`</code><script>alert(1)</script>`",
    `[<img src=x onerror=alert(1)>](https://ok.example/)`,
    `[a](https://ok.example/"onmouseover="alert(1))`,
  ];
  for (const text of hostile) {
    const blocks = parseMarkdown(text);
    const all = blocks.flatMap((b) =>
      b.kind === "paragraph" ? leaves(b.children) : b.items.flatMap(leaves),
    );
    for (const leaf of all) {
      if (leaf.kind === "href") assert.match(leaf.value, /^(https?|mailto):/, `${text} → ${leaf.value}`);
    }
    // Whatever the tree holds, its words are the input's words (as text nodes, which the page escapes).
    const words = all
      .filter((l) => l.kind !== "href")
      .map((l) => l.value)
      .join("");
    assert.ok(words.length > 0, text);
  }
  // The href a link keeps is the parsed URL: quotes are escaped by the URL parser, never raw.
  const tricky = parseInline(`[a](https://ok.example/"onmouseover="alert(1))`);
  const link = tricky.find((n) => n.kind === "link");
  if (link?.kind === "link") assert.ok(!link.href.includes('"'), link.href);
  assert.equal(safeHref("javascript:alert(1)"), undefined);
  assert.equal(safeHref(" https://ok.example/ "), "https://ok.example/");
  assert.equal(safeHref("https://ok.exa mple/"), undefined);
  assert.equal(safeHref("\u0000https://ok.example/"), undefined);
});

test("a huge description is cut, not parsed whole", () => {
  const blocks = parseMarkdown(`${"*".repeat(200_000)}x`);
  const text = blocks.flatMap((b) => (b.kind === "paragraph" ? leaves(b.children) : [])).map((l) => l.value);
  assert.ok(text.join("").length <= 20_000);
});
