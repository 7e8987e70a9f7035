/**
 * The CLI against a broken or hostile server: answers without end are cut at a limit, answers that stop
 * coming end with the client's own timeout, error answers of streams are read in part, a live stream
 * that never ends its line or message is closed, and a list whose cursor never moves on is not followed
 * for ever. Each ends with a clear error instead of a hang or the machine's memory filling up.
 */
import assert from "node:assert/strict";
import type { ServerResponse } from "node:http";
import { after, before, test } from "node:test";
import { ApiClient, ApiError } from "../../src/cli/client.ts";
import { flood, HostileServer, hostileSource, json } from "./hostile.ts";
import { fount } from "./run.ts";

const MB = 1024 * 1024;
/** How the webhook list answers: the same cursor every time, or a new one every time. */
let listing: "same cursor" | "new cursors" = "same cursor";
let pagesServed = 0;
/** Connections to the stream, per source. */
const streams = new Map<string, number>();

let server: HostileServer;
before(async () => {
  server = await HostileServer.start((_req, res, url) => {
    const p = url.pathname;
    if (p === "/v1/users/me") {
      // 8 MB past the client's limit, then the end: without a limit, 136 MB that are not JSON.
      res.writeHead(200, { "content-type": "application/json" });
      return flood(res, "x".repeat(MB), 136 * MB);
    }
    const source = /^\/v1\/sources\/(dc_\w+)$/.exec(p);
    if (source) return json(res, { data: { ...hostileSource, id: source[1] } });
    if (/^\/v1\/sources\/dc_\w+\/event_summaries$/.test(p)) return json(res, { data: [] });
    if (p === "/v1/sources/dc_hostile1/events/export") {
      // An error answer that goes on and on, then stalls: read in part, never to its end.
      res.writeHead(500, { "content-type": "application/json" });
      return flood(res, "x".repeat(64 * 1024), 50 * MB, true);
    }
    const stream = /^\/sources\/(dc_\w+)\/sse$/.exec(p);
    if (stream) return answerStream(stream[1]!, res);
    if (p === "/v1/users/me/webhooks") {
      pagesServed++;
      // Past these many pages, an error that ends a client without limits, so that it fails quickly.
      if (pagesServed > 1100) return json(res, { error: "no more pages", code: "not_found" }, 404);
      const data = Array.from({ length: 100 }, (_, i) => ({
        id: `wh_${pagesServed}x${i}`,
        name: null,
        url: "https://example.com/h",
        active: true,
        created_at: 1,
      }));
      const cursor = listing === "same cursor" ? "same" : `page${pagesServed}`;
      return json(res, {
        page_info: { total_count: 1e9, count: 100, start_cursor: null, end_cursor: cursor },
        data,
      });
    }
    json(res, { error: `no ${p} here`, code: "not_found" }, 404);
  });
});
after(() => server.close());

/** The live stream of `source`: how each misbehaves is in its name. */
function answerStream(source: string, res: ServerResponse): void {
  const n = (streams.get(source) ?? 0) + 1;
  streams.set(source, n);
  // A reconnection is refused, so that a client without limits ends with this error, not in a loop.
  if (n > 1) return void json(res, { error: "reconnected", code: "not_found" }, 404);
  if (source === "dc_stalls") {
    // The start of an error answer, then nothing more.
    res.writeHead(500, { "content-type": "application/json" });
    return void res.write('{"error": "an error that never ');
  }
  res.writeHead(200, { "content-type": "text/event-stream" });
  if (source === "dc_longline") {
    res.write("data: ");
    return void flood(res, "x".repeat(64 * 1024), 20 * MB);
  }
  // dc_longmessage: data lines without the blank line that ends a message.
  flood(res, `data: ${"y".repeat(1000)}\n`, 20 * MB);
}

test("an answer that goes on past 128 MB is cut there and reported, not read to its end", async () => {
  const res = await fount(["whoami"], server.env(), 60_000);
  assert.equal(res.code, 1, res.stderr);
  assert.match(
    res.stderr,
    /^fount: GET \/v1\/users\/me answered with a body over 128 MB; not read further \(bad_response\)$/m,
  );
});

test("an answer whose body stops arriving ends with the client's timeout error", async () => {
  const stalled = await HostileServer.start((_req, res) => {
    res.writeHead(200, { "content-type": "application/json" });
    res.write('{"data": ');
  });
  try {
    const client = new ApiClient({ url: stalled.url, apiKey: "fnt_x", timeoutMs: 500 });
    await assert.rejects(client.get("/v1/users/me"), (err: Error) => {
      assert.ok(err instanceof ApiError, String(err));
      assert.equal(err.code, "timeout");
      assert.equal(err.message, `${stalled.url} did not answer within 0.5 s`);
      return true;
    });
  } finally {
    await stalled.close();
  }
});

test("an export's error answer that goes on without end is read in part, and its status reported", async () => {
  const exported = await fount(["events", "export", "dc_hostile1"], server.env());
  assert.equal(exported.code, 1, exported.stderr);
  assert.equal(exported.stderr, "fount: The export answered 500 Internal Server Error (http_500)\n");
});

test("a live stream's error answer that stops half-way is read for a while, and its status reported", async () => {
  const followed = await fount(["events", "dc_stalls", "-f"], server.env());
  assert.equal(followed.code, 1, followed.stderr);
  assert.match(followed.stderr, /^fount: The stream answered 500 Internal Server Error \(http_500\)$/m);
});

test("a live stream whose line or message never ends is closed with an error", async () => {
  for (const source of ["dc_longline", "dc_longmessage"]) {
    const res = await fount(["events", source, "-f"], server.env(), 60_000);
    assert.equal(res.code, 1, `${source}: ${res.stderr}`);
    assert.match(
      res.stderr,
      /^fount: The stream sent a message over 16 MB; it was closed \(bad_response\)$/m,
      source,
    );
    assert.equal(streams.get(source), 1, "the stream is not opened again");
  }
});

test("a list whose cursor comes back, or that never ends, is not followed for ever", async () => {
  listing = "same cursor";
  pagesServed = 0;
  const same = await fount(["list", "webhooks"], server.env());
  assert.equal(same.code, 1, same.stderr);
  assert.equal(
    same.stderr,
    "fount: GET /v1/users/me/webhooks answered the page cursor same a second time; the list was not read further (bad_response)\n",
  );
  assert.equal(pagesServed, 2);

  listing = "new cursors";
  pagesServed = 0;
  const endless = await fount(["list", "webhooks"], server.env(), 60_000);
  assert.equal(endless.code, 1, endless.stderr);
  assert.equal(
    endless.stderr,
    "fount: GET /v1/users/me/webhooks went on past 1000 pages; not read further (bad_response)\n",
  );
  assert.equal(pagesServed, 1000);
});
