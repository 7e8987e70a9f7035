/**
 * The web console's delivery history in a real browser: a webhook's delivery opens its attempts as a
 * timeline whose request and response unfold (the signature shown, the answer's body), a replay asked
 * for and confirmed sends the event again and opens the new delivery marked as a replay, and an event's
 * page and the source page's event detail list the event's deliveries and replay it to a chosen
 * listener. Driven by roles and names; axe-core on each page; no console errors on the way.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import {
  createWebhook,
  deploySource,
  emit,
  entries,
  hookSourceCode,
  Receiver,
  subscribe,
} from "../delivery/receiver.ts";
import {
  assertFitsWidth,
  axe,
  consoleSuite,
  openPage,
  signInToSources,
  skip,
  wait,
  waitForFocus,
} from "./browser.ts";

const suite = consoleSuite({ webhookAllowPrivate: true });
let receiver: Receiver;
before(async () => {
  if (skip) return;
  receiver = await Receiver.start();
  // The first delivery fails for good (a 4xx: no retry comes in the middle) with an explanation;
  // every later one succeeds.
  receiver.answer = (_q, n) =>
    n === 0 ? { status: 422, headers: { "x-reason": "db down" }, body: "database unavailable" } : 200;
});
after(() => receiver?.close());

test("a delivery's attempts unfold in a timeline; replay, confirmed, sends the event again as a marked delivery", {
  skip,
}, async () => {
  const { server } = suite;
  const carol = await server.createUser("carol");
  const source = await deploySource(server, hookSourceCode, carol.key);
  const hook = await createWebhook(server, receiver.url, carol.key);
  await server.api("PUT", `/v1/webhooks/${hook.id}`, { key: carol.key, body: { name: "orders hook" } });
  await subscribe(server, { emitter_id: source.id, listener_id: hook.id }, carol.key);
  await emit(source.endpoint, { order: 42 });
  const dispatcher = server.built.services.dispatcher;
  await dispatcher.drain();
  const [event] = await entries(server, `/v1/sources/${source.id}`, undefined, carol.key);

  const context = await suite.browser.newContext({ viewport: { width: 1000, height: 800 } });
  const { page, problems } = await openPage(context);
  await signInToSources(page, server.url, carol.key);

  // The webhook's deliveries link to each delivery's attempts.
  await page.goto(`${server.url}/#/webhooks/${hook.id}`);
  await page.getByRole("heading", { name: "Webhook orders hook" }).waitFor({ timeout: wait });
  await page.getByRole("link", { name: /^del_/ }).click();
  const heading = page.getByRole("heading", { name: /^Delivery del_/, level: 1 });
  await heading.waitFor({ timeout: wait });
  const firstId = (await heading.innerText()).replace("Delivery ", "");
  await waitForFocus(page, `H1 Delivery ${firstId}`);
  const attempts = page.getByRole("list", { name: "Attempts" });
  const first = attempts.getByRole("listitem").first();
  await first
    .getByRole("heading", { name: /^Attempt 1 · .* · failed · HTTP 422 · \d+ ms$/ })
    .waitFor({ timeout: wait });
  assert.match(await first.locator("p.error").innerText(), /^http: HTTP 422$/);
  await first.locator("summary", { hasText: `Request to ${receiver.url}` }).click();
  assert.match(
    await first.getByText(/webhook-signature: v1,/).innerText(),
    new RegExp(`webhook-id: ${firstId}`),
  );
  await first.getByText('{"order":42}').waitFor({ timeout: wait });
  await first.locator("summary", { hasText: "Response: HTTP 422" }).click();
  await first.getByText("database unavailable").waitFor({ timeout: wait });
  await first.getByText(/x-reason: db down/).waitFor({ timeout: wait });
  await axe(page, "delivery page, attempts unfolded");

  // Replay asks first; Cancel takes nothing back to the server.
  await page.getByRole("button", { name: "Replay event" }).click();
  await waitForFocus(page, "BUTTON Cancel");
  await page.getByRole("button", { name: "Cancel" }).click();
  await waitForFocus(page, "BUTTON Replay event");
  await page.getByRole("button", { name: "Replay event" }).click();
  await page
    .getByText(`Send event ${event.id} again to ${hook.id}, as a new delivery?`)
    .waitFor({ timeout: wait });
  await axe(page, "delivery page, replay confirmation");
  await page.getByRole("button", { name: "Yes, replay" }).click();
  await page.getByText(/^Replayed as del_/).waitFor({ timeout: wait });
  await dispatcher.drain();
  await page.getByRole("link", { name: "Open it" }).click();
  await page.getByRole("heading", { name: /^Delivery del_/, level: 1 }).waitFor({ timeout: wait });
  const replayed = page.getByText(new RegExp(`^Replay rpl_\\w+ of ${firstId}$`));
  await replayed.waitFor({ timeout: wait });
  await attempts
    .getByRole("heading", { name: /^Attempt 1 · .* · succeeded · HTTP 200 · \d+ ms · replay$/ })
    .waitFor({ timeout: wait });
  await axe(page, "a replayed delivery");
  assert.equal(receiver.requests.length, 2);
  assert.deepEqual(receiver.requests[1]!.json, { order: 42 });

  // The event's page lists both deliveries, and replays to a chosen listener.
  await page.getByRole("link", { name: event.id }).click();
  await page.getByRole("heading", { name: `Event ${event.id}`, level: 1 }).waitFor({ timeout: wait });
  const table = page.getByRole("table", { name: `Deliveries of event ${event.id}, newest first` });
  await table.getByRole("row").nth(2).waitFor({ timeout: wait });
  assert.equal(await table.getByRole("row", { name: /\(replay\)/ }).count(), 1);
  await page.getByLabel("Replay to").selectOption({ label: "Webhook orders hook" });
  await page.getByRole("button", { name: "Replay…" }).click();
  await page.getByRole("button", { name: "Yes, replay" }).click();
  await page.getByText(/^Replayed as del_/).waitFor({ timeout: wait });
  await table.getByRole("row").nth(3).waitFor({ timeout: wait });
  await axe(page, "event page with its deliveries");
  await dispatcher.drain();
  assert.equal(receiver.requests.length, 3);

  // The source page's event detail has the same list.
  await page.getByRole("link", { name: source.id }).click();
  await page.getByRole("list", { name: "Events" }).getByRole("button").first().click({ timeout: wait });
  const detail = page.getByRole("region", { name: "Event detail" });
  await detail
    .getByRole("table", { name: `Deliveries of event ${event.id}, newest first` })
    .getByRole("row")
    .nth(3)
    .waitFor({ timeout: wait });
  await axe(page, "source page, an event's deliveries");

  assert.deepEqual(problems, []);
  await context.close();

  // At a phone's width the timeline, unfolded, fits without sideways scrolling.
  const phone = await suite.browser.newContext({ viewport: { width: 390, height: 844 } });
  const small = await openPage(phone);
  await signInToSources(small.page, server.url, carol.key);
  await small.page.goto(`${server.url}/#/deliveries/${firstId}`);
  const item = small.page.getByRole("list", { name: "Attempts" }).getByRole("listitem").first();
  await item.locator("summary").first().click({ timeout: wait });
  await item.locator("summary").nth(1).click();
  await item.getByText("database unavailable").waitFor({ timeout: wait });
  await assertFitsWidth(small.page, "the delivery page at phone width");
  await axe(small.page, "the delivery page at 390 px");
  assert.deepEqual(small.problems, []);
  await phone.close();
});
