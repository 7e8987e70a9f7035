/**
 * What the console's browser tests share: the Debian Chromium they drive (skipped outside CI when it is
 * missing), a server and a browser opened before a file's tests and closed after, pages that collect
 * their problems, axe-core checks and signing in.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { after, before } from "node:test";
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core";
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
    suite.server = await startServer(overrides);
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
    // A live stream the page closes itself (tab change, navigation) is aborted, not failed.
    if (r.failure()?.errorText === "net::ERR_ABORTED" && r.url().includes("/sse")) return;
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

/** Fills the sign-in form with `key` and submits it (the caller waits for what it expects next). */
export async function signIn(page: Page, url: string, key: string): Promise<void> {
  await page.goto(url);
  await page.getByLabel("API key").fill(key);
  await page.getByRole("button", { name: "Sign in" }).click();
}
