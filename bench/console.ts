/**
 * The web console's figures (issue 17): JavaScript bytes and time until the signed-in source list is
 * visible with 1,000 sources, and how the page keeps up while a source's Events tab receives 100
 * events/s. Informational, apart from `npm run bench`: `node bench/console.ts [--sources 1000] [--rate 100] [--seconds 10]`.
 * Needs /usr/bin/chromium.
 */
import { parseArgs } from "node:util";
import { chromium } from "playwright-core";
import { buildConsole } from "../src/http/console-assets.ts";
import { startServer } from "../test/helpers.ts";

const { values } = parseArgs({
  options: {
    sources: { type: "string", default: "1000" },
    rate: { type: "string", default: "100" },
    seconds: { type: "string", default: "10" },
  },
});
const sourceCount = Number(values.sources);
const rate = Number(values.rate);
const seconds = Number(values.seconds);

await buildConsole();
const server = await startServer();
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox"],
});
try {
  const user = await server.createUser("bench");
  let endpoint = "";
  let firstId = "";
  for (let i = 0; i < sourceCount; i++) {
    const res = await server.api("POST", "/v1/sources", {
      key: user.key,
      body: { key: "http-new-requests", name: `source-${String(i).padStart(4, "0")}` },
    });
    if (res.status !== 200) throw new Error(`deploy failed: ${res.status} ${res.text}`);
    if (i === 0) {
      endpoint = res.body.data.endpoint_url;
      firstId = res.body.data.id;
    }
  }

  // A first load of the signed-in list in a fresh browser context (empty cache), signed in by cookie.
  const signIn = await fetch(`${server.url}/console/session`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-fount-console": "1" },
    body: JSON.stringify({ api_key: user.key }),
  });
  const cookie = (signIn.headers.get("set-cookie") ?? "").split(";")[0]!.split("=");
  // Each load in a fresh context (empty cache); the first also warms the browser, the last is reported.
  const loads: number[] = [];
  let scriptBytes = 0;
  let context = await browser.newContext();
  let listPage = await context.newPage();
  for (let i = 0; i < 3; i++) {
    await context.close();
    context = await browser.newContext({ viewport: { width: 1000, height: 700 } });
    await context.addCookies([{ name: cookie[0]!, value: cookie.slice(1).join("="), url: server.url }]);
    listPage = await context.newPage();
    let bytes = 0;
    listPage.on("response", async (r) => {
      if (r.request().resourceType() === "script") bytes += (await r.body()).length;
    });
    const start = Date.now();
    await listPage.goto(server.url);
    await listPage
      .getByRole("row", { name: /source-/ })
      .first()
      .waitFor();
    loads.push(Date.now() - start);
    scriptBytes = bytes;
  }
  const timeline = (await listPage.evaluate(
    "performance.getEntries().filter(e => e.entryType !== 'paint').slice(0, 8).map(e => [e.name.replace(location.origin, ''), Math.round(e.startTime), Math.round(e.responseEnd ?? e.startTime + e.duration)])",
  )) as Array<[string, number, number]>;
  const apiTimes: number[] = [];
  for (let i = 0; i < 5; i++) {
    const apiStart = Date.now();
    await server.api("GET", "/v1/users/me/sources?limit=25", { key: user.key });
    apiTimes.push(Date.now() - apiStart);
  }
  const listMs = loads[loads.length - 1]!;
  const apiMs = apiTimes.sort((a, b) => a - b)[2]!;

  // 100 events/s into a source whose Events tab is open: the page's longest frame gap while they arrive.
  await listPage.goto(`${server.url}/#/sources/${firstId}`);
  await listPage.getByText(/^Live/).waitFor();
  await listPage.evaluate(
    "window.__gaps = []; (function loop(t0) { requestAnimationFrame((t) => { if (t0) window.__gaps.push(t - t0); loop(t); }); })()",
  );
  let sent = 0;
  const started = Date.now();
  while (Date.now() - started < seconds * 1000) {
    const due = Math.floor(((Date.now() - started) / 1000) * rate);
    const batch: Promise<unknown>[] = [];
    for (; sent < due; sent++)
      batch.push(
        fetch(endpoint, {
          method: "POST",
          body: JSON.stringify({ n: sent }),
          headers: { "content-type": "application/json" },
        }),
      );
    await Promise.all(batch);
    await new Promise((r) => setTimeout(r, 10));
  }
  await listPage
    .getByRole("button", { name: new RegExp(`"n":${sent - 1}\\b|POST /`) })
    .first()
    .waitFor();
  const gaps = ((await listPage.evaluate("window.__gaps")) as number[]).sort((a, b) => a - b);
  const p99 = gaps[Math.floor(gaps.length * 0.99)] ?? 0;
  console.log(
    JSON.stringify(
      {
        sources: sourceCount,
        first_load_script_bytes: scriptBytes,
        first_load_list_visible_ms: listMs,
        all_loads_ms: loads,
        timeline,
        list_api_call_median_ms: apiMs,
        events_sent: sent,
        events_per_second: rate,
        frame_gap_p99_ms: Math.round(p99),
        frame_gap_max_ms: Math.round(gaps[gaps.length - 1] ?? 0),
      },
      null,
      2,
    ),
  );
  await context.close();
} finally {
  await browser.close();
  await server.close();
}
