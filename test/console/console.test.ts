/**
 * The web console in a real browser (Debian's Chromium through playwright-core), driven by roles and
 * names as a user would: sign in, deploy from the registry through the form, watch an event arrive live
 * and read a nested field, see a thrown error, see a failed delivery and redeliver it, sign out; tenancy,
 * a wrong key, where the key is (not) kept, axe-core on each page, and no console errors on the way.
 * FOUNT_CONSOLE_SCREENSHOTS=1 writes the screenshots in docs/console/.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { Page, Request } from "playwright-core";
import { Receiver } from "../delivery/receiver.ts";
import {
  assertFitsWidth,
  axe,
  consoleSuite,
  fillComponentCode,
  openPage,
  signIn as signInAt,
  skip,
  wait,
  waitForFocus,
} from "./browser.ts";

const screenshots = process.env.FOUNT_CONSOLE_SCREENSHOTS === "1";
const suite = consoleSuite({ webhookAllowPrivate: true });
let receiver: Receiver;
before(async () => {
  if (!skip) receiver = await Receiver.start();
});
after(() => receiver?.close());

async function shot(page: Page, name: string): Promise<void> {
  if (screenshots) await page.screenshot({ path: `docs/console/${name}.png` });
}

const signIn = (page: Page, key: string) => signInAt(page, suite.server.url, key);

/** Clicks `refresh` until `ready()` holds (the state behind it changes on the server in its own time). */
async function until(
  ready: () => Promise<boolean>,
  refresh: () => Promise<void>,
  what: string,
): Promise<void> {
  const deadline = Date.now() + wait;
  while (!(await ready())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await refresh();
    await new Promise((r) => setTimeout(r, 250));
  }
}

const thrower = `export default {
  key: "console-thrower",
  name: "Thrower",
  version: "0.0.1",
  type: "source",
  props: { http: { type: "$.interface.http" } },
  async run(event) {
    console.log("about to throw");
    throw new Error("boom from the console test");
  },
};
`;

test("a user signs in, deploys from the registry, watches events, errors and deliveries, and signs out", {
  skip,
}, async () => {
  const alice = await suite.server.createUser("alice");
  // An organization of alice's with a source of its own, for the switcher.
  const org = await suite.server.api("POST", "/v1/admin/orgs", {
    body: { orgname: "acme", owner_id: alice.id },
  });
  assert.equal(org.status, 200, org.text);
  const orgSource = await suite.server.api("POST", "/v1/sources", {
    key: alice.key,
    body: { key: "http-new-requests", name: "acme-feed", org_id: org.body.data.id },
  });
  assert.equal(orgSource.status, 200, orgSource.text);
  const context = await suite.browser.newContext({ viewport: { width: 1000, height: 700 } });
  const { page, problems } = await openPage(context);

  // Sign in.
  await page.goto(suite.server.url);
  await page.getByRole("heading", { name: "Sign in" }).waitFor({ timeout: wait });
  await axe(page, "sign-in");
  await shot(page, "sign-in");
  await page.getByLabel("API key").fill(alice.key);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "Sources", level: 1 }).waitFor({ timeout: wait });
  await waitForFocus(page, "H1 Sources");
  await page.getByText("No sources yet.").waitFor({ timeout: wait });
  // Acting for the organization lists its sources; back to personal, none.
  await page.getByLabel("Acting as").selectOption({ label: "acme (organization)" });
  await page.getByRole("link", { name: "acme-feed" }).waitFor({ timeout: wait });
  await axe(page, "source list of an organization");
  await page.getByLabel("Acting as").selectOption({ label: "alice (personal)" });
  await page.getByText("No sources yet.").waitFor({ timeout: wait });

  // The key is nowhere page scripts can read it.
  const stored = (await page.evaluate(
    "({ cookie: document.cookie, local: JSON.stringify(Object.entries(localStorage)), session: JSON.stringify(Object.entries(sessionStorage)) })",
  )) as Record<string, string>;
  for (const [where, text] of Object.entries(stored)) {
    assert.ok(!text.includes(alice.key), `the key is in ${where}`);
    assert.ok(!text.includes("fount_session"), `the session is readable in ${where}`);
  }
  const cookies = await context.cookies();
  const session = cookies.find((c) => c.name === "fount_session");
  assert.ok(session?.httpOnly && session.sameSite === "Strict");

  // New source from the registry, through the generated form. A cron timer previews its next ticks.
  await page.getByRole("link", { name: "New source" }).click();
  await page.getByRole("heading", { name: "New source", level: 1 }).waitFor({ timeout: wait });
  await page.getByRole("button", { name: "Use Cron Schedule" }).click();
  await page.getByText(/Next ticks: .*:00:00/).waitFor({ timeout: wait });
  await page.getByLabel("Cron expression").fill("*/5 * * * *");
  await page.getByText(/Next ticks: \S+ \d\d:\d[05]:00, /).waitFor({ timeout: wait });
  await axe(page, "new source form with a timer");
  await page.getByRole("button", { name: "Choose another component" }).click();
  await page.getByLabel("Search components").fill("requests");
  await page.getByRole("button", { name: "Use New Requests" }).click();
  await page.getByRole("heading", { name: "New source: New Requests" }).waitFor({ timeout: wait });
  // The chosen component's form replaces the list: focus goes to its heading, not to the page's body.
  await waitForFocus(page, "H1 New source: New Requests");
  await page.getByLabel("Source name (optional)").fill("orders");
  await page.getByLabel("Response Status Code (optional)").fill("202");
  await axe(page, "new source form");
  await shot(page, "new-source");
  await page.getByRole("button", { name: "Deploy" }).click();
  await page.getByRole("heading", { name: "orders", level: 1 }).waitFor({ timeout: wait });
  await waitForFocus(page, "H1 orders");
  const sourceId = /#\/sources\/(dc_\w+)/.exec(page.url())?.[1];
  assert.ok(sourceId, page.url());
  const endpoint = await page.getByLabel("Endpoint URL").inputValue();
  assert.match(endpoint, /\/e\//);
  await page.getByText(/^Live/).waitFor({ timeout: wait });

  // An event sent to the endpoint appears live; its nested field can be read in the tree.
  const hit = await fetch(`${endpoint}/orders`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ order: { id: 42, customer: { name: "Ada Lovelace" } } }),
  });
  assert.equal(hit.status, 202);
  const events = page.getByRole("list", { name: "Events" });
  await events.getByRole("button", { name: /POST \/orders/ }).click({ timeout: wait });
  const detail = page.getByRole("region", { name: "Event detail" });
  await detail.locator("summary", { hasText: /^body:/ }).click();
  await detail.locator("summary", { hasText: /^order:/ }).click();
  await detail.locator("summary", { hasText: /^customer:/ }).click();
  await detail.getByText('"Ada Lovelace"').waitFor({ timeout: wait });
  await axe(page, "source page, events");
  await shot(page, "source-events");

  // The source list shows it, with its component and state.
  await page.getByRole("link", { name: "Sources" }).click();
  const row = page.getByRole("row", { name: /orders/ });
  await row.waitFor({ timeout: wait });
  assert.match(await row.innerText(), /http-new-requests[\s\S]*Active/);
  await row.getByRole("img", { name: "1 in the last hour" }).waitFor({ timeout: wait });
  assert.equal(
    await row.getByRole("cell", { name: "0", exact: true }).count(),
    1,
    "no errors in the last hour",
  );
  await axe(page, "source list");
  await shot(page, "sources");

  // A component that throws: its error shows on the Errors tab with message and stack.
  await page.getByRole("link", { name: "New source" }).click();
  await fillComponentCode(page, thrower);
  await page.getByRole("button", { name: "Continue with this code" }).click();
  await page.getByRole("heading", { name: "New source: Thrower" }).waitFor({ timeout: wait });
  await page.getByRole("button", { name: "Deploy" }).click();
  await page.getByRole("tab", { name: "Errors" }).click({ timeout: wait });
  await page.getByText(/^Live/).waitFor({ timeout: wait });
  const throwerEndpoint = await page.getByLabel("Endpoint URL").inputValue();
  await fetch(throwerEndpoint, {
    method: "POST",
    body: "{}",
    headers: { "content-type": "application/json" },
  });
  await page
    .getByRole("list", { name: "Errors" })
    .getByRole("button", { name: /boom from the console test/ })
    .click({ timeout: wait });
  await page.getByRole("region", { name: "Event detail" }).locator("pre.stack").waitFor({ timeout: wait });
  assert.match(await page.locator("pre.stack").innerText(), /boom from the console test/);
  await axe(page, "source page, errors");
  await shot(page, "source-errors");
  await page.getByRole("tab", { name: "Logs" }).click();
  await page
    .getByRole("list", { name: "Logs" })
    .getByRole("button", { name: /about to throw/ })
    .waitFor({ timeout: wait });

  // A webhook whose first delivery fails (400, failed at once), then is redelivered and succeeds.
  receiver.answer = (_request, n) => (n === 0 ? 400 : 200);
  await page.getByRole("link", { name: "Webhooks" }).click();
  await page.getByLabel("URL", { exact: true }).fill(receiver.url);
  await page.getByLabel("Name (optional)").fill("orders hook");
  await page.getByRole("button", { name: "Create webhook" }).click();
  await page.getByRole("heading", { name: "Signing secret of orders hook" }).waitFor({ timeout: wait });
  assert.match(await page.locator(".secret code").innerText(), /^whsec_/);
  const webhookId = /#\/webhooks\/(wh_\w+)/.exec(
    (await page.getByRole("link", { name: "orders hook" }).getAttribute("href")) ?? "",
  )?.[1];
  assert.ok(webhookId);
  await axe(page, "webhooks");

  await page.getByRole("link", { name: "Subscriptions" }).click();
  await page.getByLabel("Emitter (source ID, dc_…)").fill(sourceId);
  await page.getByLabel("Listener (webhook wh_… or source dc_…)").fill(webhookId);
  await page.getByRole("button", { name: "Subscribe" }).click();
  await page.getByRole("row", { name: new RegExp(sourceId) }).waitFor({ timeout: wait });
  await axe(page, "subscriptions");

  await fetch(`${endpoint}/second`, {
    method: "POST",
    body: '{"n":2}',
    headers: { "content-type": "application/json" },
  });
  await page.getByRole("link", { name: "Webhooks" }).click();
  await page.getByRole("link", { name: "orders hook" }).click();
  await page.getByRole("heading", { name: "Webhook orders hook" }).waitFor({ timeout: wait });
  const refresh = () => page.getByRole("button", { name: "Refresh" }).click();
  await until(
    async () => (await page.getByRole("cell", { name: "failed", exact: true }).count()) > 0,
    refresh,
    "a failed delivery",
  );
  assert.equal(await page.getByRole("cell", { name: "400", exact: true }).count(), 1);
  await axe(page, "deliveries");
  await shot(page, "deliveries");
  await page.getByRole("button", { name: /^Redeliver del_/ }).click();
  await until(
    async () => (await page.getByRole("cell", { name: "succeeded", exact: true }).count()) > 0,
    refresh,
    "the redelivery",
  );
  assert.equal(receiver.requests.length, 2);
  // Nothing failed is left since yesterday, so "Redeliver all failed" queues none.
  await page.getByRole("button", { name: "Redeliver all failed" }).click();
  await page.getByText("0 failed deliveries queued again.").waitFor({ timeout: wait });
  assert.deepEqual(receiver.requests[1]?.json?.event?.body ?? receiver.requests[1]?.json?.body, { n: 2 });

  // Sign out ends the session on the server: the old cookie, replayed, is refused.
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.getByRole("heading", { name: "Sign in" }).waitFor({ timeout: wait });
  await waitForFocus(page, "H2 Sign in");
  const replay = await fetch(`${suite.server.url}/v1/users/me`, {
    headers: { cookie: `fount_session=${session.value}` },
  });
  assert.equal(replay.status, 401);

  assert.deepEqual(problems, []);
  await context.close();

  // A second user sees none of the first one's sources, even by ID.
  await suite.server.createUser("bob").then(async (bob) => {
    // At phone width.
    const other = await suite.browser.newContext({ viewport: { width: 390, height: 800 } });
    const { page: bobPage, problems: bobProblems } = await openPage(other, [
      /404 GET .*\/v1\/sources\/dc_/,
      /status of 404/,
    ]);
    await signIn(bobPage, bob.key);
    await bobPage.getByText("No sources yet.").waitFor({ timeout: wait });
    assert.equal(await bobPage.getByRole("link", { name: "orders" }).count(), 0);
    await assertFitsWidth(bobPage, "the source list at phone width");
    await axe(bobPage, "source list at phone width");
    await bobPage.goto(`${suite.server.url}/#/sources/${sourceId}`);
    await bobPage
      .getByRole("alert")
      .getByText(/not found/)
      .waitFor({ timeout: wait });
    assert.deepEqual(bobProblems, []);
    await other.close();
  });
});

test("a wrong key is refused with a message, and no session is made", { skip }, async () => {
  const context = await suite.browser.newContext();
  const { page, problems } = await openPage(context, [/401 POST .*\/console\/session/, /status of 401/]);
  await signIn(page, "fnt_wrongwrongwrongwrongwrongwrong00");
  await page.getByRole("alert").getByText("That API key is not valid.").waitFor({ timeout: wait });
  assert.equal((await context.cookies()).length, 0);
  await axe(page, "sign-in with an error");
  assert.deepEqual(problems, []);
  await context.close();
});

test("signing out cancels the calls under way: none reaches the server after the session ends", {
  skip,
}, async () => {
  const user = await suite.server.createUser("leaver");
  const hook = await suite.server.api("POST", "/v1/webhooks", {
    key: user.key,
    body: { url: "https://example.com/leaver", name: "leaver hook" },
  });
  assert.equal(hook.status, 200, hook.text);
  const context = await suite.browser.newContext();
  const { page, problems } = await openPage(context);
  await signIn(page, user.key);
  await page.getByRole("heading", { name: "Sources", level: 1 }).waitFor({ timeout: wait });
  await page.goto(`${suite.server.url}/#/webhooks/${hook.body.data.id}`);
  await page.getByRole("heading", { name: "Webhook leaver hook" }).waitFor({ timeout: wait });

  // The next deliveries call is held in the browser, as a slow answer would be, until after sign-out.
  const held = new Promise<{ request: Request; send: () => Promise<void> }>((resolve) => {
    void page.route(/\/deliveries\?limit=50$/, (route) =>
      resolve({ request: route.request(), send: () => route.continue() }),
    );
  });
  await page.getByRole("button", { name: "Refresh" }).click();
  const { request, send } = await held;
  const outcome = new Promise<string>((resolve) => {
    page.on("requestfailed", (r) => r === request && resolve(`failed: ${r.failure()?.errorText}`));
    page.on("response", (r) => r.request() === request && resolve(`answered ${r.status()}`));
  });
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.getByRole("heading", { name: "Sign in" }).waitFor({ timeout: wait });
  // Sent on now, a call the page had not cancelled would reach the server without its session.
  await send().catch(() => undefined);
  assert.equal(await outcome, "failed: net::ERR_ABORTED");
  assert.deepEqual(problems, []);
  await context.close();
});
