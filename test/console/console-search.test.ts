/**
 * The web console's event search in a real browser: the filters above a source's events list find
 * exactly the matching events (words, a JSON path, a delivery outcome), the results page with Older and
 * Newer and open like any event, Clear brings back the live list, and every matching event replays to a
 * chosen webhook after a count and a confirmation. Driven by roles and names; axe-core on each state; no
 * console errors on the way; the form fits a phone's width.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { createWebhook, deploySource, emit, hookSourceCode, Receiver } from "../delivery/receiver.ts";
import { assertFitsWidth, axe, consoleSuite, openPage, signInToSources, skip, wait } from "./browser.ts";

const suite = consoleSuite({ webhookAllowPrivate: true });
let receiver: Receiver;
before(async () => {
  if (skip) return;
  receiver = await Receiver.start();
});
after(() => receiver?.close());

test("the search box and filters find the matching events, which page, open and replay after a confirmation", {
  skip,
}, async () => {
  const { server } = suite;
  const dana = await server.createUser("dana");
  const source = await deploySource(server, hookSourceCode, dana.key);
  for (let n = 0; n < 23; n++) await emit(source.endpoint, { order: n, city: n % 2 ? "Lisbon" : "Porto" });
  await emit(source.endpoint, { order: 99, city: "Madrid", user: { id: 42 } });
  const hook = await createWebhook(server, receiver.url, dana.key);
  await server.api("PUT", `/v1/webhooks/${hook.id}`, { key: dana.key, body: { name: "search hook" } });

  const context = await suite.browser.newContext({ viewport: { width: 1000, height: 900 } });
  // The one refused search (a where without a colon) is a 400 the page shows.
  const { page, problems } = await openPage(context, [/status of 400/, /^400 GET .*where=nocolon/]);
  await signInToSources(page, server.url, dana.key);
  await page.goto(`${server.url}/#/sources/${source.id}`);
  const form = page.getByRole("form", { name: "Search events" });
  await form.waitFor({ timeout: wait });
  await page.getByRole("list", { name: "Events" }).getByRole("button").first().waitFor({ timeout: wait });
  await axe(page, "source page with the search form");

  // Words: 11 of the 24 events are in Lisbon; 20 a page.
  await form.getByLabel("Search").fill("lisbon");
  await form.getByRole("button", { name: "Search" }).click();
  await page.getByText("11 matching events · page 1").waitFor({ timeout: wait });
  const results = page.getByRole("list", { name: "Matching events" });
  assert.equal(await results.getByRole("button").count(), 11);
  await axe(page, "search results");

  // A JSON path, and paging over more than one page.
  await form.getByLabel("Search").fill("");
  await form.getByLabel("Where (one path:value a line)").fill("user.id:42");
  await form.getByRole("button", { name: "Search" }).click();
  await page.getByText("1 matching event · page 1").waitFor({ timeout: wait });
  await results.getByRole("button").first().click();
  const detail = page.getByRole("region", { name: "Event detail" });
  await detail.getByText('"Madrid"').waitFor({ timeout: wait });
  await detail.getByRole("link", { name: /^Open event / }).waitFor({ timeout: wait });

  await form.getByLabel("Where (one path:value a line)").fill("");
  await form.getByLabel("Search").fill("order");
  await form.getByRole("button", { name: "Search" }).click();
  await page.getByText("24 matching events · page 1").waitFor({ timeout: wait });
  assert.equal(await results.getByRole("button").count(), 20);
  const pages = page.getByRole("navigation", { name: "Pages of matching events" });
  assert.equal(await pages.getByRole("button", { name: "Newer" }).isDisabled(), true);
  await pages.getByRole("button", { name: "Older" }).click();
  await page.getByText("24 matching events · page 2").waitFor({ timeout: wait });
  assert.equal(await results.getByRole("button").count(), 4);
  assert.equal(await pages.getByRole("button", { name: "Older" }).isDisabled(), true);
  await pages.getByRole("button", { name: "Newer" }).click();
  await page.getByText("24 matching events · page 1").waitFor({ timeout: wait });

  // Replay every Lisbon event: counted, confirmed, sent.
  await form.getByLabel("Search").fill("lisbon");
  await form.getByRole("button", { name: "Search" }).click();
  await page.getByText("11 matching events · page 1").waitFor({ timeout: wait });
  await page.getByLabel("Replay every matching event to").selectOption({ label: "Webhook search hook" });
  await page.getByRole("button", { name: "Replay matching…" }).click();
  await page
    .getByText(`Send 11 events again to Webhook search hook, as new deliveries?`)
    .waitFor({ timeout: wait });
  await axe(page, "replay of a search, confirmation");
  await page.getByRole("button", { name: "Yes, replay 11" }).click();
  await page.getByText(/^Replayed 11 events \(replay rpl_\w+\)\.$/).waitFor({ timeout: wait });
  await server.built.services.dispatcher.drain();
  assert.equal(receiver.requests.length, 11);
  assert.ok(receiver.requests.every((r) => r.json.city === "Lisbon"));

  // A bad condition is said, not thrown; Clear brings back the live list.
  await form.getByLabel("Where (one path:value a line)").fill("nocolon");
  await form.getByRole("button", { name: "Search" }).click();
  await page.getByText(/where must be <json path>:<value>/).waitFor({ timeout: wait });
  await form.getByRole("button", { name: "Clear" }).click();
  await page.getByRole("list", { name: "Events" }).getByRole("button").first().waitFor({ timeout: wait });
  assert.deepEqual(problems, []);
  await context.close();

  const phone = await suite.browser.newContext({ viewport: { width: 390, height: 844 } });
  const small = await openPage(phone);
  await signInToSources(small.page, server.url, dana.key);
  await small.page.goto(`${server.url}/#/sources/${source.id}`);
  await small.page.getByRole("form", { name: "Search events" }).waitFor({ timeout: wait });
  await assertFitsWidth(small.page, "source page with the search form at a phone's width");
  await phone.close();
});
