/**
 * What the console's browser tests share: the Debian Chromium they drive (skipped outside CI when it is
 * missing), a server and a browser opened before a file's tests and closed after, pages that collect
 * their problems, axe-core checks and signing in.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { after, before } from "node:test";
import { type Browser, type BrowserContext, chromium, type Locator, type Page } from "playwright-core";
import type { Config } from "../../src/config.ts";
import { buildConsole } from "../../src/http/console-assets.ts";
import { startServer, type TestServer } from "../helpers.ts";

export const executablePath = "/usr/bin/chromium";
// Generous: the machine may be loaded; nothing here measures speed.
export const wait = 60_000;
const axeSource = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");

// Outside CI a machine without the browser skips these tests; CI installs it (.ci/run), so there they run or fail.
export const skip =
  existsSync(executablePath) || process.env.CI
    ? false
    : `no browser at ${executablePath} (apt-get install chromium)`;

export interface ConsoleSuite {
  server: TestServer;
  browser: Browser;
}

/** Opens a server (with `overrides`) and the browser before the file's tests, and closes both after. */
export function consoleSuite(overrides: Partial<Config> = {}): ConsoleSuite {
  const suite = {} as ConsoleSuite;
  before(async () => {
    if (skip) return;
    // The console from the current source, not a dist/ left over from an older checkout.
    await buildConsole();
    suite.server = await startServer(overrides, {}, { publishRegistry: true });
    suite.browser = await chromium.launch({ executablePath, headless: true, args: ["--no-sandbox"] });
  });
  after(async () => {
    await suite.browser?.close();
    await suite.server?.close();
  });
  return suite;
}

/** A page whose console errors, page errors and failing requests (but those `allowed`) are collected. */
export async function openPage(
  context: BrowserContext,
  allowed: RegExp[] = [],
): Promise<{ page: Page; problems: string[] }> {
  const page = await context.newPage();
  const problems: string[] = [];
  const ok = (text: string) => allowed.some((a) => a.test(text));
  page.on("console", (m) => {
    if (m.type() === "error" && !ok(m.text())) problems.push(`console: ${m.text()}`);
  });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("requestfailed", (r) => {
    // What the page cancels itself is aborted, not failed: a live stream it closes (tab change,
    // navigation), the calls under way when the user signs out.
    if (r.failure()?.errorText === "net::ERR_ABORTED") return;
    const text = `request failed: ${r.url()} ${r.failure()?.errorText}`;
    if (!ok(text)) problems.push(text);
  });
  page.on("response", (r) => {
    const text = `${r.status()} ${r.request().method()} ${r.url()}`;
    if (r.status() >= 400 && !ok(text)) problems.push(`response: ${text}`);
  });
  return { page, problems };
}

/** Fails on axe-core's serious and critical findings for the page as it is. */
export async function axe(page: Page, name: string): Promise<void> {
  if (!(await page.evaluate("typeof window.axe !== 'undefined'"))) await page.evaluate(axeSource);
  const violations = (await page.evaluate(
    "window.axe.run(document, { resultTypes: ['violations'] }).then(r => r.violations.map(v => ({ id: v.id, impact: v.impact, nodes: v.nodes.map(n => n.target.join(' ')).slice(0, 3) })))",
  )) as Array<{ id: string; impact: string; nodes: string[] }>;
  const bad = violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  assert.deepEqual(bad, [], `axe on ${name}: ${JSON.stringify(bad)}`);
}

/** Signs in with `key` and waits for the first page, the source list. */
export async function signInToSources(page: Page, url: string, key: string): Promise<void> {
  await signIn(page, url, key);
  await page.getByRole("heading", { name: "Sources", level: 1 }).waitFor({ timeout: wait });
}

/** Fills the sign-in form with `key` and submits it (the caller waits for what it expects next). */
export async function signIn(page: Page, url: string, key: string): Promise<void> {
  await page.goto(url);
  await page.getByLabel("API key").fill(key);
  await page.getByRole("button", { name: "Sign in" }).click();
}

const focusedScript =
  "(() => { const e = document.activeElement; if (!e || e === document.body) return 'BODY'; " +
  "return e.tagName + ' ' + (e.getAttribute('aria-label') || e.textContent || '').trim().slice(0, 60); })()";

/** The focused element as `TAG text` (its first 60 characters), or `BODY` when focus fell to the page. */
export async function focusedName(page: Page): Promise<string> {
  return (await page.evaluate(focusedScript)) as string;
}

/**
 * Waits until focus is on `expected` (`TAG text`, see `focusedName`): a heading takes it when it renders,
 * which may follow the page's data. Checked on every animation frame inside the page (a string, not
 * `waitForFunction`, whose predicate the page's policy refuses to compile); fails saying where focus is.
 */
export async function waitForFocus(page: Page, expected: string): Promise<void> {
  const seen = await page.evaluate(`new Promise((resolve) => {
    const deadline = Date.now() + ${wait};
    const look = () => {
      const now = ${focusedScript};
      if (now === ${JSON.stringify(expected)} || Date.now() > deadline) resolve(now);
      else requestAnimationFrame(look);
    };
    look();
  })`);
  assert.equal(seen, expected, "focus");
}

/** Fails when the page scrolls sideways (wider than the window), naming the elements that stick out. */
export async function assertFitsWidth(page: Page, name: string): Promise<void> {
  const result = (await page.evaluate(`(() => {
    const width = window.innerWidth;
    const out = [];
    for (const e of document.querySelectorAll("body *")) {
      const r = e.getBoundingClientRect();
      if (r.right > width + 0.5) out.push(e.tagName + "." + e.className);
    }
    return { scrollWidth: document.documentElement.scrollWidth, width, out: out.slice(0, 5) };
  })()`)) as { scrollWidth: number; width: number; out: string[] };
  assert.ok(result.scrollWidth <= result.width, `${name} scrolls sideways: ${JSON.stringify(result)}`);
}

/** Whether the element has keyboard focus. */
export async function hasFocus(locator: Locator): Promise<boolean> {
  // The root project has no DOM types: the element is typed loosely here.
  return locator.evaluate(
    (e: { ownerDocument: { activeElement: unknown } }) => e === e.ownerDocument.activeElement,
  );
}

/**
 * Fills the New source page's code field once its editor has taken over from the plain textarea: a
 * fill that meets the swap (the textarea focused, then removed before the text is inserted) types into
 * nothing, and the page keeps an empty code (seen once in a clean-clone run, at load).
 */
export async function fillComponentCode(page: Page, code: string): Promise<void> {
  await page.getByText("JavaScript or TypeScript. Tab indents").waitFor({ timeout: wait });
  await page.getByLabel("Component code").fill(code);
}
