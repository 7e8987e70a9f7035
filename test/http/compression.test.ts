/**
 * Compression as a client meets it: Brotli or gzip by Accept-Encoding for the console's files, `/docs`,
 * `/openapi.json`, `/metrics` and API JSON of 1 KB or more; small answers, SSE streams (sse.test.ts) and
 * source endpoints' answers (the component's own bytes) as they are.
 */
import assert from "node:assert/strict";
import http from "node:http";
import { after, before, test } from "node:test";
import zlib from "node:zlib";
import { compressionThresholdBytes } from "../../src/http/plugins/compression.ts";
import { deploy, fixture } from "../fixtures/components/fixtures.ts";
import { adminKey, startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
before(async () => {
  server = await startServer({}, {}, { publishRegistry: true });
});
after(() => server.close());

interface Raw {
  status: number;
  headers: http.IncomingHttpHeaders;
  /** The bytes as sent, before any decoding. */
  bytes: Buffer;
  /** The body decoded by its content-encoding. */
  text: string;
}

/**
 * A GET read with node:http, which leaves the body encoded as the server sent it (fetch would decode it).
 * `path` is on the API's origin, unless it is a whole URL.
 */
function get(path: string, headers: Record<string, string> = {}): Promise<Raw> {
  return new Promise((resolve, reject) => {
    http
      .get(
        /^https?:/.test(path) ? path : server.url + path,
        { headers: { authorization: `Bearer ${adminKey}`, ...headers } },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("error", reject);
          res.on("end", () => {
            const bytes = Buffer.concat(chunks);
            const encoding = res.headers["content-encoding"];
            const decoded =
              encoding === "br"
                ? zlib.brotliDecompressSync(bytes)
                : encoding === "gzip"
                  ? zlib.gunzipSync(bytes)
                  : bytes;
            resolve({
              status: res.statusCode ?? 0,
              headers: res.headers,
              bytes,
              text: decoded.toString("utf8"),
            });
          });
        },
      )
      .on("error", reject);
  });
}

test("/openapi.json, /docs and the console's files come compressed, as the client asks", async () => {
  const page = await get("/");
  const script = /src="(\/console\/app\.js\?v=\w+)"/.exec(page.text)?.[1];
  assert.ok(script, "the console page names its script");
  const css = /href="(\/docs\/reference-\w+\.css)"/.exec((await get("/docs")).text)?.[1];
  assert.ok(css, "the reference page names its stylesheet");
  for (const path of ["/openapi.json", "/docs", script, css]) {
    const plain = await get(path);
    assert.equal(plain.status, 200, path);
    assert.equal(plain.headers["content-encoding"], undefined, `${path} without Accept-Encoding`);
    for (const [accept, expected] of [
      ["gzip, deflate, br", "br"],
      ["gzip", "gzip"],
      ["br;q=0.5, gzip", "gzip"],
    ] as const) {
      const packed = await get(path, { "accept-encoding": accept });
      assert.equal(packed.headers["content-encoding"], expected, `${path} for ${accept}`);
      assert.match(String(packed.headers.vary), /accept-encoding/i, `${path} varies by Accept-Encoding`);
      assert.equal(packed.text, plain.text, `${path} decodes to the same bytes`);
      assert.ok(packed.bytes.length < plain.bytes.length / 2, `${path} ${expected} is at most half the size`);
    }
  }
  assert.equal(
    (await get(script, { "accept-encoding": "br" })).headers["cache-control"],
    "public, max-age=31536000, immutable",
  );
});

test("API JSON is compressed from the threshold up; smaller answers are sent as they are", async () => {
  const small = await get("/v1/users/me", { "accept-encoding": "br, gzip" });
  assert.equal(small.status, 200);
  assert.ok(small.bytes.length < compressionThresholdBytes, `the user is ${small.bytes.length} bytes`);
  assert.equal(small.headers["content-encoding"], undefined);

  const list = await get("/v1/components/registry?limit=20", { "accept-encoding": "br, gzip" });
  assert.equal(list.status, 200);
  assert.equal(list.headers["content-encoding"], "br");
  assert.ok(list.text.length >= compressionThresholdBytes, `the registry list is ${list.text.length} bytes`);
  assert.ok(Array.isArray(JSON.parse(list.text).data));

  // Errors too are JSON; a 404 body is small.
  const missing = await get("/v1/nothing", { "accept-encoding": "br" });
  assert.equal(missing.status, 404);
  assert.equal(JSON.parse(missing.text).code, "not_found");
});

test("/metrics is compressed for a scraper that asks for gzip", async () => {
  const scrape = await get("/metrics", { "accept-encoding": "gzip" });
  assert.equal(scrape.status, 200);
  assert.equal(scrape.headers["content-encoding"], "gzip");
  assert.match(scrape.text, /^# HELP fount_/m);
});

test("a source endpoint's answer goes out as the component wrote it, never compressed", async () => {
  const source = await deploy(server, { component_code: fixture("responder.mjs") });
  const name = "x".repeat(4 * compressionThresholdBytes);
  const res = await get(`${source.endpoint_url}?name=${name}`, { "accept-encoding": "br, gzip" });
  assert.equal(res.status, 201);
  assert.equal(res.headers["content-encoding"], undefined);
  assert.equal(res.bytes.toString("utf8"), `hello ${name}`);
});
