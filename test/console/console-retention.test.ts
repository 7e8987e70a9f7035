/**
 * A source's retention in the web console, in a real browser: the Configuration tab's Retention form
 * saves a policy, shows the server's refusal of one over the instance's maximum at its field, and goes
 * back to the server's defaults. Driven by roles and labels; axe-core on the form; no console errors
 * but the refusal asked for.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { deploy } from "../fixtures/components/fixtures.ts";
import { axe, consoleSuite, openPage, signInToSources, skip, wait } from "./browser.ts";

const suite = consoleSuite();

test("the Retention form saves events and days, shows an over-maximum refusal at its field, and resets", {
  skip,
}, async () => {
  const { server } = suite;
  const dana = await server.createUser("dana");
  const source = await deploy(
    server,
    {
      component_code: `export default { name: "kept", version: "1", async run() { this.$emit({ ok: 1 }); } }`,
    },
    dana.key,
  );
  const context = await suite.browser.newContext({ viewport: { width: 1000, height: 800 } });
  // The refusal asked for below is the only failed request.
  const { page, problems } = await openPage(context, [
    /^400 PUT .*\/v1\/sources\/dc_/,
    /Failed to load resource: the server responded with a status of 400/,
  ]);
  await signInToSources(page, server.url, dana.key);
  await page.goto(`${server.url}/#/sources/${source.id}`);
  await page.getByRole("heading", { name: "kept", level: 1 }).waitFor({ timeout: wait });
  await page.getByRole("tab", { name: "Configuration" }).click();
  const form = page.getByRole("form", { name: "Retention" });
  await form.waitFor({ timeout: wait });
  const events = form.getByLabel("Events kept per channel");
  const days = form.getByLabel("Days kept");
  assert.equal(await events.inputValue(), "");
  await axe(page, "source configuration with retention");

  await events.fill("1000");
  await days.fill("30");
  await form.getByRole("button", { name: "Save retention" }).click();
  await form.getByText("Retention saved.").waitFor({ timeout: wait });
  const saved = await server.api("GET", `/v1/sources/${source.id}`, { key: dana.key });
  assert.deepEqual(saved.body.data.retention, { events: 1000, days: 30 });

  await events.fill("2000000");
  await form.getByRole("button", { name: "Save retention" }).click();
  const refusal = form.getByRole("alert");
  await refusal.waitFor({ timeout: wait });
  assert.match(await refusal.innerText(), /retention\.events may be at most 1000000 on this instance/);
  assert.equal(await events.getAttribute("aria-invalid"), "true");
  await axe(page, "retention refused at its field");
  assert.deepEqual(
    (await server.api("GET", `/v1/sources/${source.id}`, { key: dana.key })).body.data.retention,
    { events: 1000, days: 30 },
    "nothing changed",
  );

  await form.getByRole("button", { name: "Use the server's defaults" }).click();
  await form.getByText("Back to the server's defaults.").waitFor({ timeout: wait });
  assert.equal(
    (await server.api("GET", `/v1/sources/${source.id}`, { key: dana.key })).body.data.retention,
    null,
  );
  assert.equal(await events.inputValue(), "");
  assert.deepEqual(problems, []);
  await context.close();
});
