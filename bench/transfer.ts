/**
 * Bytes a browser downloads for the first load of the console's sign-in page and of the API reference
 * (`/docs`), and the size of `/openapi.json`, each as sent (compressed, as Chromium asks) and decoded
 * (issue 30). Informational, apart from `npm run bench`; needs /usr/bin/chromium.
 *
 *   node bench/transfer.ts                 a server from this tree
 *   node bench/transfer.ts --url <url>     any running server (another commit, to compare)
 */
import http from "node:http";
import { parseArgs } from "node:util";
import { chromium } from "playwright-core";
import { startServer, type TestServer } from "../test/helpers.ts";

const { values } = parseArgs({ options: { url: { type: "string" } } });
const server: TestServer | undefined = values.url ? undefined : await startServer();
const base = values.url ?? server!.url;

/** Sent and decoded bytes of every response of one page load in a fresh context (empty cache). */
async function pageLoad(path: string): Promise<{ sent: number; decoded: number; files: number }> {
  const browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox"],
  });
  try {
    const page = await (await browser.newContext()).newPage();
    const cdp = await page.context().newCDPSession(page);
    await cdp.send("Network.enable");
    const decoded = new Map<string, number>();
    let sent = 0;
    cdp.on("Network.dataReceived", (e) =>
      decoded.set(e.requestId, (decoded.get(e.requestId) ?? 0) + e.dataLength),
    );
    cdp.on("Network.loadingFinished", (e) => {
      sent += e.encodedDataLength;
    });
    await page.goto(base + path, { waitUntil: "networkidle" });
    return { sent, decoded: [...decoded.values()].reduce((a, b) => a + b, 0), files: decoded.size };
  } finally {
    await browser.close();
  }
}

/** The body's size as sent for an Accept-Encoding (none: identity). */
function bodyBytes(path: string, acceptEncoding?: string): Promise<number> {
  return new Promise((resolve, reject) => {
    http
      .get(base + path, { headers: acceptEncoding ? { "accept-encoding": acceptEncoding } : {} }, (res) => {
        let n = 0;
        res.on("data", (c: Buffer) => {
          n += c.length;
        });
        res.on("end", () => resolve(n));
      })
      .on("error", reject);
  });
}

const kb = (n: number) => `${(n / 1024).toFixed(1)} KB`;
try {
  for (const [name, path] of [
    ["console, first load (sign-in page)", "/"],
    ["API reference, first load", "/docs"],
  ] as const) {
    const load = await pageLoad(path);
    console.log(
      `${name.padEnd(36)} ${kb(load.sent).padStart(10)} sent, ${kb(load.decoded)} decoded, ${load.files} files`,
    );
  }
  const [plain, br, gzip] = await Promise.all([
    bodyBytes("/openapi.json"),
    bodyBytes("/openapi.json", "br"),
    bodyBytes("/openapi.json", "gzip"),
  ]);
  console.log(
    `${"/openapi.json".padEnd(36)} ${kb(plain).padStart(10)} plain, ${kb(br)} br, ${kb(gzip)} gzip`,
  );
} finally {
  await server?.close();
}
