/**
 * The web console in a real browser, part three: the component code editor (CodeMirror, loaded as a
 * chunk of its own on the New source page only: typing, a build error marked at its line, Tab and the
 * way out of the editor, its label), and a component's labels and descriptions as it defines them,
 * Markdown rendered as text and safe links only, whatever a hostile description holds.
 * FOUNT_CONSOLE_SCREENSHOTS=1 writes docs/console/code-editor.png.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import type { Page, Response } from "playwright-core";
import {
  axe,
  consoleSuite,
  focusedName,
  openPage,
  signInToSources,
  skip,
  wait,
  waitForFocus,
} from "./browser.ts";

const suite = consoleSuite();

const signIn = (page: Page, key: string) => signInToSources(page, suite.server.url, key);

test("the first page loads no editor; the New source page's editor highlights, marks a build error at its line and lets Tab out", {
  skip,
}, async () => {
  const user = await suite.server.createUser("typist");
  const context = await suite.browser.newContext({ viewport: { width: 1000, height: 800 } });
  // The build error is a 422 the page shows; it is expected here.
  const { page, problems } = await openPage(context, [/422 POST .*\/v1\/components/, /status of 422/]);
  const scripts: Response[] = [];
  page.on("response", (r) => {
    if (/\/console\/[\w-]+\.js/.test(r.url())) scripts.push(r);
  });
  await signIn(page, user.key);
  await page.getByText("No sources yet.").waitFor({ timeout: wait });

  // The signed-in source list loads one script, well under the 350 KB budget; the editor is not in it.
  const firstLoad = await Promise.all(
    scripts.map(async (r) => ({ url: r.url(), bytes: (await r.body()).length })),
  );
  assert.deepEqual(
    firstLoad.map((s) => new URL(s.url).pathname),
    ["/console/app.js"],
  );
  const firstBytes = firstLoad.reduce((n, s) => n + s.bytes, 0);
  assert.ok(firstBytes < 350_000, `first load: ${firstBytes} bytes of JavaScript`);
  assert.ok(
    !(await (await page.request.get(firstLoad[0]!.url)).text()).includes("cm-content"),
    "CodeMirror is not in app.js",
  );

  await page.getByRole("link", { name: "New source" }).click();
  await page.getByRole("heading", { name: "New source", level: 1 }).waitFor({ timeout: wait });
  const editor = page.getByRole("textbox", { name: "Component code" });
  await page.locator(".cm-editor").waitFor({ timeout: wait });
  const chunk = scripts.find((r) => /chunk-\w+\.js/.test(r.url()) && r.url() !== firstLoad[0]!.url);
  assert.ok(chunk, "the editor came in a chunk of its own");
  assert.match((await editor.getAttribute("aria-describedby")) ?? "", /component-code-help/);
  await axe(page, "new source with the code editor");

  // Typing: each line as typed (the editor indents new lines itself; JavaScript does not mind).
  await editor.click();
  const typed = [
    "export default {",
    'key: "typed",',
    'name: "Typed",',
    'version: "0.0.1",',
    'type: "source",',
    "props: {},",
    "async run() { this.$emit({ a: 1 },, ) },",
    "};",
  ];
  await page.keyboard.type(typed.join("\n"));
  // Highlighted: keywords and strings are spans of their own.
  assert.ok((await page.locator(".cm-line").nth(1).locator("span").count()) >= 1);

  // The server's 422 gives line 7: marked there (underline and gutter), and said in words.
  await page.getByRole("button", { name: "Continue with this code" }).click();
  const alert = page.getByRole("alert");
  await alert.waitFor({ timeout: wait });
  assert.match(await alert.innerText(), /^Line 7, column \d+: /);
  await page.locator(".cm-line").nth(6).locator(".cm-lintRange-error").waitFor({ timeout: wait });
  assert.equal(await page.locator(".cm-lintRange-error").count(), 1, "one mark, on line 7");
  assert.equal(await page.locator(".cm-lint-marker-error").count(), 1, "a marker in the gutter");
  await axe(page, "code editor with a build error");
  if (process.env.FOUNT_CONSOLE_SCREENSHOTS === "1") {
    await page.locator(".cm-editor").scrollIntoViewIfNeeded();
    await page.screenshot({ path: "docs/console/code-editor.png" });
  }

  // Tab indents inside the editor; Escape, then Tab, moves on to the next field.
  await editor.click();
  await page.keyboard.press("Control+End");
  await page.keyboard.press("Tab");
  assert.match(await focusedName(page), /^DIV /, "Tab stays in the editor");
  await page.keyboard.press("Escape");
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate("document.activeElement.id"), "component-code-file", "Escape, Tab leaves");

  // Fixed by clearing it and typing again, the code loads: the component's form follows, focused.
  // (Typing straight over a selection works too, but Chrome then tries to keep the removed text's
  // colours in a style attribute, which the page's policy refuses with a console error.)
  await editor.click();
  await page.keyboard.press("Control+a");
  await page.keyboard.press("Backspace");
  await page.keyboard.type(typed.join("\n").replace(",, )", ")"));
  await page.getByRole("button", { name: "Continue with this code" }).click();
  await page.getByRole("heading", { name: "New source: Typed" }).waitFor({ timeout: wait });
  await waitForFocus(page, "H1 New source: Typed");
  assert.deepEqual(problems, [], "only the expected 422");
  await context.close();
});

// Its description is Markdown with hostile parts; one prop has no label (a platform one), others do.
const described = `export default {
  key: "console-described",
  name: "Described",
  version: "0.0.1",
  type: "source",
  description: "Emits **every** request as \`{method, path}\`, see [the docs](https://example.com/docs).\\n\\n<img src=x onerror=\\"window.__pwned=1\\"> [bad link](javascript:window.__pwned=2) <script>window.__pwned=3</script>",
  props: {
    httpInterface: { type: "$.interface.http" },
    maxItems: {
      type: "integer",
      label: "Maximum items",
      description: "At most _this_ many; \`0\` means no limit.",
      optional: true,
    },
    rawName: { type: "string", optional: true },
  },
  async run(event) {
    this.$emit(event.body);
  },
};
`;

test("labels and descriptions show as the component defines them, Markdown as text, never as markup", {
  skip,
}, async () => {
  const user = await suite.server.createUser("reader");
  const saved = await suite.server.api("POST", "/v1/components", {
    key: user.key,
    body: { component_code: described },
  });
  assert.equal(saved.status, 200, saved.text);
  const context = await suite.browser.newContext({ viewport: { width: 1000, height: 800 } });
  const { page, problems } = await openPage(context);
  await signIn(page, user.key);
  await page.getByRole("link", { name: "New source" }).click();
  await page.locator(".cm-editor").waitFor({ timeout: wait });
  await page.getByRole("textbox", { name: "Component code" }).fill(described);
  await page.getByRole("button", { name: "Continue with this code" }).click();
  await page.getByRole("heading", { name: "New source: Described" }).waitFor({ timeout: wait });

  const main = page.locator("main");
  const description = main.locator(".description");
  // Markdown: strong, code and a link (that says it opens a new tab).
  assert.equal(await description.locator("strong").innerText(), "every");
  assert.equal(await description.locator("code").innerText(), "{method, path}");
  const link = description.getByRole("link", { name: "the docs (opens in a new tab)" });
  assert.equal(await link.getAttribute("href"), "https://example.com/docs");
  assert.equal(await link.getAttribute("rel"), "noopener noreferrer nofollow");
  // The hostile parts are text: no element was made from them, no script address, nothing ran.
  const text = await description.innerText();
  assert.ok(text.includes('<img src=x onerror="window.__pwned=1">'), text);
  assert.ok(text.includes("<script>window.__pwned=3</script>"), text);
  assert.ok(text.includes("bad link") && !text.includes("javascript:"), text);
  assert.equal(await main.locator("img, script, [onerror]").count(), 0);
  assert.equal(await description.getByRole("link").count(), 1, "only the https link");
  assert.equal(await page.evaluate("window.__pwned"), undefined);

  // Labels as defined: the platform prop by its kind, a labelled prop by its label, the unlabelled by its name.
  assert.equal(await main.getByText("httpInterface").count(), 0, "no raw name for the HTTP prop");
  await main.getByText("HTTP endpoint", { exact: true }).waitFor({ timeout: wait });
  const max = page.getByLabel("Maximum items (optional)");
  const help = page.locator(`[id="${await max.getAttribute("aria-describedby")}"]`);
  assert.equal(await help.innerText(), "At most this many; 0 means no limit.");
  assert.equal(await help.locator("em").innerText(), "this");
  assert.equal(await help.locator("code").innerText(), "0");
  await page.getByLabel("rawName (optional)").waitFor({ timeout: wait });
  await axe(page, "a component's Markdown description and labels");

  // The registry's cards render their descriptions' backticks as code too.
  await page.getByRole("button", { name: "Choose another component" }).click();
  await waitForFocus(page, "H1 New source");
  const card = page
    .getByRole("listitem")
    .filter({ has: page.getByRole("heading", { name: "Interval Schedule" }) });
  await card.locator("code").first().waitFor({ timeout: wait });
  assert.ok(!(await card.innerText()).includes("`"), "no literal backticks");
  assert.deepEqual(problems, []);
  await context.close();
});
