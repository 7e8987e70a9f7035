/**
 * The web console at a phone's width (390 px) in a real browser: every page and state fits without
 * sideways scrolling (`scrollWidth <= innerWidth`, what sticks out named), passes axe-core, and keeps
 * keyboard focus where a person expects it as they go: the new page's heading after each route change,
 * the shown-once secret after creating a webhook, the heading again when the focused row is deleted, the
 * sign-in heading after signing out.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import type { Page } from "playwright-core";
import { adminKey } from "../helpers.ts";
import {
  assertFitsWidth,
  axe,
  consoleSuite,
  focusedName,
  hasFocus,
  openPage,
  signIn,
  skip,
  wait,
  waitForFocus,
} from "./browser.ts";

const suite = consoleSuite();

/** Fits the width and passes axe: what every page and state here must do. */
async function check(page: Page, name: string): Promise<void> {
  await assertFitsWidth(page, name);
  await axe(page, `${name} at 390 px`);
}

/** Follows a link of the main navigation and waits for the page's heading to take focus. */
async function go(page: Page, link: string, heading = link): Promise<void> {
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: link }).click();
  await page.getByRole("heading", { name: heading, level: 1 }).waitFor({ timeout: wait });
  await waitForFocus(page, `H1 ${heading}`);
}

test("every page fits a 390 px phone, passes axe, and keeps focus where a person expects it", {
  skip,
}, async () => {
  const api = suite.server.api;
  // Data with long names and IDs in every list, as they are in use.
  const source = await api("POST", "/v1/sources", {
    body: { key: "http-new-requests", name: "a-source-with-quite-a-long-name-for-a-phone" },
  });
  assert.equal(source.status, 200, source.text);
  const sourceId = source.body.data.id as string;
  const hit = await fetch(`${source.body.data.endpoint_url}/orders/2026/very/long/path`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ order: { id: 42, note: "x".repeat(300) } }),
  });
  assert.ok(hit.status < 300);
  const webhook = await api("POST", "/v1/webhooks", {
    body: { url: "https://receiver.example.com/hooks/with/a/rather/long/path/indeed", name: "phone hook" },
  });
  assert.equal(webhook.status, 200, webhook.text);
  const webhookId = webhook.body.data.id as string;
  assert.equal(
    (await api("POST", "/v1/subscriptions", { body: { emitter_id: sourceId, listener_id: webhookId } }))
      .status,
    200,
  );
  assert.equal(
    (
      await api("POST", "/v1/accounts", {
        body: { app: "github", name: "a github account", credentials: { t: "x" } },
      })
    ).status,
    200,
  );
  const someone = await suite.server.createUser("someone-with-a-long-username");
  assert.equal(
    (await api("POST", "/v1/admin/orgs", { body: { orgname: "phone-org", owner_id: someone.id } })).status,
    200,
  );

  const context = await suite.browser.newContext({ viewport: { width: 390, height: 844 } });
  const { page, problems } = await openPage(context);
  await page.goto(suite.server.url);
  await page.getByRole("heading", { name: "Sign in" }).waitFor({ timeout: wait });
  await check(page, "sign-in");
  await signIn(page, suite.server.url, adminKey);
  await page.getByRole("heading", { name: "Sources", level: 1 }).waitFor({ timeout: wait });
  await waitForFocus(page, "H1 Sources");
  await page
    .getByRole("row", { name: /a-source-with-quite/ })
    .getByRole("img")
    .waitFor({ timeout: wait });
  await check(page, "sources");

  // New source: the registry and the editor, then a component's form.
  await page.getByRole("link", { name: "New source" }).click();
  await page.getByRole("heading", { name: "New source", level: 1 }).waitFor({ timeout: wait });
  await waitForFocus(page, "H1 New source");
  await page.locator(".cm-editor").waitFor({ timeout: wait });
  await check(page, "new source");
  await page.getByRole("button", { name: "Use New Requests" }).click();
  await waitForFocus(page, "H1 New source: New Requests");
  await check(page, "new source form");

  // A source: its tabs, an event's detail, the delete question.
  await go(page, "Sources");
  await page.getByRole("link", { name: "a-source-with-quite-a-long-name-for-a-phone" }).click();
  await waitForFocus(page, "H1 a-source-with-quite-a-long-name-for-a-phone");
  await page.getByRole("list", { name: "Events" }).getByRole("button").first().click({ timeout: wait });
  await page.getByRole("region", { name: "Event detail" }).waitFor({ timeout: wait });
  await check(page, "source events with a detail");
  for (const tab of ["Logs", "Errors", "Configuration"]) {
    await page.getByRole("tab", { name: tab }).click();
    await page.getByRole("tabpanel", { name: tab }).waitFor({ timeout: wait });
    if (tab === "Configuration") await page.getByLabel("Source name").waitFor({ timeout: wait });
    await check(page, `source ${tab}`);
  }
  await page.getByRole("button", { name: "Delete", exact: true }).click();
  assert.equal(await focusedName(page), "BUTTON Cancel");
  await check(page, "source delete question");
  await page.getByRole("button", { name: "Cancel" }).click();

  // Webhooks: the secret shown once takes focus; deleting the focused row leaves focus on the heading.
  await go(page, "Webhooks");
  await page.getByLabel("URL", { exact: true }).fill("https://receiver.example.com/second");
  await page.getByLabel("Name (optional)").fill("second hook");
  await page.getByRole("button", { name: "Create webhook" }).click();
  const secret = page.getByRole("region", { name: "Signing secret of second hook" });
  await secret.waitFor({ timeout: wait });
  assert.equal(await hasFocus(secret), true, "the secret has focus");
  await page.getByRole("link", { name: "second hook" }).waitFor({ timeout: wait });
  await check(page, "webhooks with a secret");
  const remove = page.getByRole("button", { name: "Delete webhook second hook" });
  await remove.focus();
  await page.keyboard.press("Enter");
  await page.getByRole("link", { name: "second hook" }).waitFor({ state: "detached", timeout: wait });
  await waitForFocus(page, "H1 Webhooks");
  await page.getByRole("link", { name: "phone hook" }).click();
  await waitForFocus(page, "H1 Webhook phone hook");
  await check(page, "webhook deliveries");

  await go(page, "Subscriptions");
  await page.getByRole("row", { name: new RegExp(sourceId) }).waitFor({ timeout: wait });
  await check(page, "subscriptions");

  await go(page, "Accounts");
  await page.getByRole("row", { name: /a github account/ }).waitFor({ timeout: wait });
  await check(page, "accounts");

  await go(page, "Admin");
  await page.getByRole("row", { name: /phone-org/ }).waitFor({ timeout: wait });
  await page.getByRole("button", { name: "API keys of someone-with-a-long-username" }).click();
  await page.getByRole("table", { name: "Keys of someone-with-a-long-username" }).waitFor({ timeout: wait });
  await check(page, "admin with a user's keys");

  // Signing out: the sign-in form's heading has focus.
  await page.getByRole("button", { name: "Sign out" }).click();
  await waitForFocus(page, "H2 Sign in");
  assert.deepEqual(problems, []);
  await context.close();
});
