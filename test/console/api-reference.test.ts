/**
 * The API reference page (`/docs`) in a real browser: it loads nothing but this server's files and
 * breaks no rule of its content policy, axe-core finds nothing serious in the light or the dark scheme,
 * it fits a 390 px phone without sideways scrolling, and the keyboard's first stop skips to the operations.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { axe, consoleSuite, openPage, skip } from "./browser.ts";

const suite = consoleSuite();

test("the reference page is accessible, self-contained and fits a phone", { skip }, async () => {
  for (const colorScheme of ["light", "dark"] as const) {
    for (const width of [1280, 390]) {
      const context = await suite.browser.newContext({ colorScheme, viewport: { width, height: 800 } });
      try {
        const { page, problems } = await openPage(context);
        const requested: string[] = [];
        page.on("request", (r) => requested.push(r.url()));
        await page.goto(`${suite.server.url}/docs`);
        await page.getByRole("heading", { level: 1, name: "Fount event source API" }).waitFor();
        const where = `${colorScheme} at ${width} px`;
        // A policy violation is reported on the console, so `problems` holds it.
        assert.deepEqual(problems, [], where);
        const elsewhere = requested.filter((u) => !u.startsWith(`${suite.server.url}/`));
        assert.deepEqual(elsewhere, [], `${where}: only this server's files`);
        assert.ok(
          requested.some((u) => /\/docs\/reference-\w+\.css$/.test(u)),
          `${where}: its stylesheet`,
        );
        // The phone layout only hides the index's inner lists: axe once per scheme is enough.
        if (width !== 390) await axe(page, `/docs, ${where}`);
        assert.ok(
          await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"),
          `${where}: no sideways scrolling`,
        );
        if (width === 390) continue;
        await page.keyboard.press("Tab");
        assert.equal(
          await page.evaluate("document.activeElement?.textContent"),
          "Skip to the operations",
          "Tab reaches the skip link first",
        );
        await page.keyboard.press("Enter");
        assert.match(page.url(), /#main$/);
        // An operation is reachable by its operationId, as the index links it.
        // Exact: other routes start with the same path (…/events/{event_id}, …/deliveries).
        await page.getByRole("link", { name: "GET /v1/sources/{id}/events", exact: true }).click();
        assert.match(page.url(), /#listSourceEvents$/);
        await page.getByRole("heading", { name: "GET /v1/sources/{id}/events", exact: true }).waitFor();
      } finally {
        await context.close();
      }
    }
  }
});
