/**
 * Invoking sources: the HTTP endpoint (event shape, sub-paths, bodies, the default and custom
 * responses, 413, a throwing run), manual runs, and what a run sees and does — methods, the db across
 * runs, updates and a restart, `$emit` meta and ts ordering, console output, the environment.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { deploy, emitted, events, fixture, hit } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(() => server.close());

async function manualRun(sourceId: string, event?: unknown, key?: string) {
  const res = await server.api("POST", `/v1/sources/${sourceId}/run`, {
    body: event === undefined ? {} : { event },
    key,
  });
  assert.equal(res.status, 200, res.text);
  return res.body.data;
}

test("an endpoint hit runs the source with {method, path, query, headers, bodyRaw, body, url} and answers 200 once stored", async () => {
  const s = await deploy(server, { component_code: fixture("http-echo.mjs") });
  const endpoint: string = s.configured_props.http.endpoint_url;
  assert.equal(s.endpoint_url, endpoint);
  const body = JSON.stringify({ hello: "world", list: [1, 2] });
  const res = await hit(`${endpoint}/orders/42?status=paid&tag=a`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Signature": "Sig-Value" },
    body,
  });
  assert.equal(res.status, 200);
  assert.deepEqual(res.body, { success: true });
  // Stored before the answer: the very next read shows it.
  const [entry] = await events(server, s.id);
  const { event, count, endpoint: seenEndpoint } = entry.event;
  assert.equal(count, 1);
  assert.equal(seenEndpoint, endpoint, "this.http.endpoint is the endpoint URL");
  assert.equal(event.method, "POST");
  assert.equal(event.path, "/orders/42");
  assert.deepEqual(event.query, { status: "paid", tag: "a" });
  assert.equal(event.headers["x-signature"], "Sig-Value");
  assert.equal(event.headers["content-type"], "application/json");
  for (const name of Object.keys(event.headers)) assert.equal(name, name.toLowerCase());
  assert.equal(event.bodyRaw, body);
  assert.deepEqual(event.body, { hello: "world", list: [1, 2] });
  assert.equal(event.url, `${endpoint}/orders/42?status=paid&tag=a`);
  assert.equal(entry.metadata.id, "req-1");
  assert.equal(entry.metadata.summary, "POST /orders/42");
});

test("a hit on the endpoint URL itself, with or without a trailing slash, has path / and no query", async () => {
  const s = await deploy(server, { component_code: fixture("http-echo.mjs") });
  const endpoint: string = s.configured_props.http.endpoint_url;
  for (const url of [endpoint, `${endpoint}/`, `${endpoint}?`, `${endpoint}/?a=%20b+c`]) {
    assert.equal((await hit(url, { method: "POST" })).status, 200);
  }
  const seen = (await events(server, s.id)).reverse().map((e) => e.event.event);
  assert.deepEqual(
    seen.map((e) => [e.path, e.query, e.url]),
    [
      ["/", {}, endpoint],
      ["/", {}, endpoint],
      ["/", {}, endpoint],
      ["/", { a: " b c" }, `${endpoint}?a=%20b+c`],
    ],
  );
});

test("an endpoint takes any method and path; form bodies are parsed, other bodies stay text", async () => {
  const s = await deploy(server, { component_code: fixture("http-echo.mjs") });
  const endpoint: string = s.configured_props.http.endpoint_url;
  assert.equal((await hit(endpoint)).status, 200);
  assert.equal((await hit(`${endpoint}/`, { method: "DELETE" })).status, 200);
  assert.equal(
    (
      await hit(`${endpoint}/form`, {
        method: "PUT",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: "a=1&b=2&b=3&text=hello+world",
      })
    ).status,
    200,
  );
  assert.equal(
    (
      await hit(`${endpoint}/deep/sub/path`, {
        method: "PATCH",
        headers: { "content-type": "text/plain" },
        body: "just text",
      })
    ).status,
    200,
  );
  const seen = (await emitted(server, s.id)).map((e) => e.event);
  assert.deepEqual(
    seen.map((e) => [e.method, e.path]),
    [
      ["GET", "/"],
      ["DELETE", "/"],
      ["PUT", "/form"],
      ["PATCH", "/deep/sub/path"],
    ],
  );
  assert.equal(seen[0].bodyRaw, "");
  assert.equal(seen[0].body, undefined);
  assert.deepEqual(seen[2].body, { a: "1", b: ["2", "3"], text: "hello world" });
  assert.equal(seen[2].bodyRaw, "a=1&b=2&b=3&text=hello+world");
  assert.equal(seen[3].body, "just text");
});

test("a body over 512 KB gets 413 and does not run the source; 512 KB exactly is accepted", async () => {
  const s = await deploy(server, { component_code: fixture("thrower.mjs") });
  const endpoint: string = s.configured_props.http.endpoint_url;
  const big = await hit(endpoint, {
    method: "POST",
    headers: { "content-type": "text/plain" },
    body: "x".repeat(512 * 1024 + 1),
  });
  assert.equal(big.status, 413);
  assert.deepEqual(await events(server, s.id), []);
  const edge = await hit(endpoint, {
    method: "POST",
    headers: { "content-type": "text/plain" },
    body: "x".repeat(512 * 1024),
  });
  assert.equal(edge.status, 200);
  assert.equal((await emitted(server, s.id))[0].ok.length, 512 * 1024);
});

test("an unknown endpoint is a 404", async () => {
  assert.equal((await hit(`${server.endpoints}/e/doesnotexist0000`, { method: "POST" })).status, 404);
  assert.equal((await hit(`${server.endpoints}/e/doesnotexist0000/sub`)).status, 404);
});

test("endpoint answers carry CORS headers and an x-request-id; a preflight gets 204 without a run", async () => {
  const s = await deploy(server, { component_code: fixture("http-echo.mjs") });
  const endpoint: string = s.configured_props.http.endpoint_url;
  const res = await hit(endpoint, { method: "POST", headers: { "x-request-id": "hook-7.a_B" }, body: "{}" });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("access-control-allow-origin"), "*");
  assert.equal(res.headers.get("x-request-id"), "hook-7.a_B");
  assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
  const generated = await hit(endpoint, { headers: { "x-request-id": "not valid!" } });
  assert.match(generated.headers.get("x-request-id") ?? "", /^[0-9a-f-]{36}$/);

  const preflight = await hit(`${endpoint}/sub`, {
    method: "OPTIONS",
    headers: { origin: "https://example.com", "access-control-request-method": "POST" },
  });
  assert.equal(preflight.status, 204);
  assert.match(preflight.headers.get("access-control-allow-methods") ?? "", /POST/);
  assert.equal((await events(server, s.id)).length, 2, "the preflight did not run the source");

  const unknown = await hit(`${server.endpoints}/e/doesnotexist0000`, {
    headers: { "x-request-id": "r404" },
  });
  assert.equal(unknown.headers.get("x-request-id"), "r404");
  assert.deepEqual(unknown.body, { error: "No active source has this endpoint", code: "not_found" });
});

test("a chunked body over 512 KB gets 413, and a client that hangs up mid-body runs nothing", async () => {
  const s = await deploy(server, { component_code: fixture("http-echo.mjs") });
  const endpoint = new URL(s.configured_props.http.endpoint_url);
  const send = (write: (req: http.ClientRequest) => void) =>
    new Promise<number>((resolve, reject) => {
      const req = http.request(endpoint, { method: "POST", headers: { "content-type": "text/plain" } });
      req.on("response", (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on("error", reject);
      write(req);
    });
  // No content-length: the limit is counted as the chunks arrive.
  const status = await send((req) => {
    for (let i = 0; i < 9; i++) req.write("x".repeat(64 * 1024));
    req.end();
  });
  assert.equal(status, 413);

  const cut = new Promise<void>((resolve) => {
    const req = http.request(endpoint, {
      method: "POST",
      headers: { "content-type": "text/plain", "content-length": "1000" },
    });
    req.on("error", () => resolve());
    req.write("only part of it", () => setTimeout(() => req.destroy(), 50));
  });
  await cut;
  // The endpoint still answers, and neither request ran the source.
  assert.equal((await hit(endpoint.href, { method: "POST", body: "after" })).status, 200);
  const stored = await events(server, s.id);
  assert.deepEqual(
    stored.map((e: { event: { event: { bodyRaw: string } } }) => e.event.event.bodyRaw),
    ["after"],
  );
});

test("customResponse: respond() sets status, headers and body; a numeric-string status works", async () => {
  const s = await deploy(server, { component_code: fixture("responder.mjs") });
  const endpoint: string = s.configured_props.http.endpoint_url;
  const plain = await hit(`${endpoint}?name=fount`);
  assert.equal(plain.status, 201);
  assert.equal(plain.text, "hello fount");
  assert.match(plain.headers.get("content-type") ?? "", /^text\/plain/);

  const stringStatus = await hit(`${endpoint}?mode=string-status`);
  assert.equal(stringStatus.status, 202);
  assert.equal(stringStatus.headers.get("x-mode"), "string");
  assert.deepEqual(stringStatus.body, { accepted: true });

  const challenge = await hit(`${endpoint}/slack?mode=challenge`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ challenge: "abc123" }),
  });
  assert.equal(challenge.status, 200);
  assert.deepEqual(challenge.body, { challenge: "abc123" });

  const buffer = await fetch(`${endpoint}?mode=buffer`);
  assert.equal(buffer.status, 200);
  assert.deepEqual([...new Uint8Array(await buffer.arrayBuffer())], [0, 1, 2, 255]);
});

test("customResponse: the first respond() wins, and a run that never responds gets 204", async () => {
  const s = await deploy(server, { component_code: fixture("responder.mjs") });
  const endpoint: string = s.configured_props.http.endpoint_url;
  const twice = await hit(`${endpoint}?mode=twice`);
  assert.equal(twice.status, 200);
  assert.equal(twice.text, "first");
  const none = await hit(`${endpoint}?mode=none`);
  assert.equal(none.status, 204);
  assert.equal(none.text, "");
  // The emits of every run were stored all the same.
  assert.deepEqual(
    (await emitted(server, s.id)).map((e) => e.mode),
    ["twice", "none"],
  );
});

test("a throwing run answers 500 and records the error with the original event on $errors", async () => {
  const s = await deploy(server, { component_code: fixture("thrower.mjs") });
  const endpoint: string = s.configured_props.http.endpoint_url;
  const ok = await hit(endpoint, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: '{"n":1}',
  });
  assert.equal(ok.status, 200);
  const res = await hit(`${endpoint}/x?q=1`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ fail: "this payload" }),
  });
  assert.equal(res.status, 500);
  assert.equal(typeof res.body.error, "string");
  assert.equal(JSON.stringify(res.body).includes("at run"), false, "no stack in the answer");

  const [error] = await events(server, s.id, "$errors");
  assert.equal(error.metadata.name, "$errors");
  const { original_event, original_context, error: e } = error.event;
  assert.equal(original_event.method, "POST");
  assert.equal(original_event.path, "/x");
  assert.deepEqual(original_event.query, { q: "1" });
  assert.deepEqual(original_event.body, { fail: "this payload" });
  assert.equal(e.code, "BAD_INPUT");
  assert.match(e.message ?? e.stack, /cannot handle this payload/);
  assert.match(e.stack, /cannot handle this payload/);
  assert.ok(!Number.isNaN(Date.parse(e.ts)), "error.ts is ISO 8601");
  assert.equal(typeof original_context.id, "string");
  assert.ok(!Number.isNaN(Date.parse(original_context.ts)));
  assert.equal(original_context.owner_id, s.user_id);
  // Nothing of the failed run was kept: no emit, no db write.
  assert.deepEqual(await emitted(server, s.id), [{ ok: { n: 1 }, seen: 1 }]);
  await hit(endpoint, { method: "POST", headers: { "content-type": "application/json" }, body: '{"n":2}' });
  assert.deepEqual((await emitted(server, s.id)).at(-1), { ok: { n: 2 }, seen: 2 });
});

test("the stack of a run's error points at the component's own line and shows no server paths", async () => {
  const s = await deploy(server, { component_code: fixture("thrower.mjs") });
  await hit(s.configured_props.http.endpoint_url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: '{"fail":"x"}',
  });
  const [entry] = await events(server, s.id, "$errors");
  const { stack } = entry.event.error;
  assert.equal(stack.includes(server.dataDir), false, stack);
  assert.equal(stack.includes("/src/runtime/"), false, stack);
  // `const err = new Error(...)` is on line 10 of thrower.mjs.
  assert.match(stack, /:10:\d+\)?$/m);
});

test("a manual run invokes run(event) now and answers with its emits and logs", async () => {
  const s = await deploy(server, { component_code: fixture("logger.mjs") });
  const data = await manualRun(s.id, { reason: "testing" });
  assert.equal(data.ok, true);
  assert.equal(data.emits.length, 1);
  assert.deepEqual(data.emits[0].event, { logged: true, event: { reason: "testing" } });
  assert.ok(data.logs.length >= 4);
  const byDefault = await manualRun(s.id);
  assert.equal(
    typeof byDefault.emits[0].event.event.timestamp,
    "number",
    "a manual run without event gets a timestamp",
  );
  const unknown = await server.api("POST", "/v1/sources/dc_doesnotexist/run", { body: {} });
  assert.equal(unknown.status, 404);
});

test("console output of a run becomes $logs events, in order, with their levels", async () => {
  const s = await deploy(server, { component_code: fixture("logger.mjs") });
  await manualRun(s.id);
  const logs = (await events(server, s.id, "$logs")).reverse().map((e) => e.event);
  assert.deepEqual(
    logs.map((l) => [l.level, l.message]),
    [
      ["log", "plain line { nested: { value: 1 } }"],
      ["info", "info answer=42"],
      ["warn", "careful"],
      ["error", "not thrown, only logged"],
      ["log", "straight to stdout"],
    ],
  );
  for (const l of logs) assert.equal(typeof l.ts, "number");
  // Logs are not emits.
  assert.equal((await events(server, s.id)).length, 1);
});

test("$emit meta: id, name (a channel), summary and ts are kept in the event's metadata", async () => {
  const s = await deploy(server, { component_code: fixture("emitter.mjs") });
  await manualRun(s.id, {
    emits: [
      { event: { n: 1 }, meta: { id: "a-1", summary: "first one", ts: 1_700_000_000_000 } },
      { event: { n: 2 }, meta: { id: 2, name: "alerts", summary: "to a channel" } },
      { event: "a string event" },
      { event: [1, 2, 3], meta: { name: "default" } },
    ],
  });
  const main = await events(server, s.id);
  assert.deepEqual(
    main.map((e) => e.event),
    [[1, 2, 3], "a string event", { n: 1 }],
  );
  const first = main[2];
  assert.equal(first.metadata.id, "a-1");
  assert.equal(first.metadata.summary, "first one");
  assert.equal(first.metadata.ts, 1_700_000_000_000);
  assert.equal(first.metadata.name, "");
  assert.equal(first.metadata.emitter_id, s.id);
  assert.equal(typeof first.metadata.emit_id, "string");
  assert.match(first.id, /^\d+-\d+$/);
  const alerts = await events(server, s.id, "alerts");
  assert.equal(alerts.length, 1);
  assert.deepEqual(alerts[0].event, { n: 2 });
  assert.equal(alerts[0].metadata.name, "alerts");
  assert.equal(alerts[0].metadata.id, 2);
});

test("emits with ts are stored oldest first, whatever the order of the calls", async () => {
  const s = await deploy(server, { component_code: fixture("emitter.mjs") });
  const data = await manualRun(s.id, {
    emits: [
      { event: { at: 3 }, meta: { id: "c", ts: 3000 } },
      { event: { at: 1 }, meta: { id: "a", ts: 1000 } },
      { event: { at: 2 }, meta: { id: "b", ts: 2000 } },
    ],
  });
  assert.deepEqual(
    data.emits.map((e: { event: { at: number } }) => e.event.at),
    [1, 2, 3],
  );
  const stored = await events(server, s.id);
  assert.deepEqual(
    stored.reverse().map((e) => e.event.at),
    [1, 2, 3],
  );
  const ids = stored.map((e) => e.id);
  assert.deepEqual([...ids].sort(compareEventIds), ids, "event IDs follow the ts order");
});

function compareEventIds(a: string, b: string): number {
  const [am, as] = a.split("-").map(Number);
  const [bm, bs] = b.split("-").map(Number);
  return am - bm || as - bs;
}

test("methods are callable on this, and this.db is kept across runs and updates", async () => {
  const s = await deploy(server, { component_code: fixture("http-echo.mjs") });
  const endpoint: string = s.configured_props.http.endpoint_url;
  for (let i = 0; i < 3; i++) assert.equal((await hit(endpoint, { method: "POST" })).status, 200);
  const updated = await server.api("PUT", `/v1/sources/${s.id}`, {
    body: { component_code: fixture("http-echo.mjs").replace('version: "0.1.0"', 'version: "0.1.1"') },
  });
  assert.equal(updated.status, 200, updated.text);
  await manualRun(s.id, { method: "MANUAL", path: "/" });
  assert.deepEqual(
    (await emitted(server, s.id)).map((e) => e.count),
    [1, 2, 3, 4],
  );
});

test("concurrent hits of one source run one at a time, each seeing the db the previous one left", async () => {
  const s = await deploy(server, { component_code: fixture("http-echo.mjs") });
  const endpoint: string = s.configured_props.http.endpoint_url;
  const answers = await Promise.all(
    Array.from({ length: 12 }, (_, i) => hit(`${endpoint}/${i}`, { method: "POST" })),
  );
  for (const a of answers) assert.equal(a.status, 200);
  const counts = (await emitted(server, s.id)).map((e) => e.count);
  assert.deepEqual(
    counts,
    Array.from({ length: 12 }, (_, i) => i + 1),
  );
});

test("process.env holds only PD_COMPONENT, the source's id", async () => {
  const a = await deploy(server, { component_code: fixture("env-reader.mjs") });
  const b = await deploy(server, { component_code: fixture("env-reader.mjs") });
  await manualRun(a.id);
  await manualRun(b.id);
  assert.deepEqual((await emitted(server, a.id))[0], {
    keys: ["PD_COMPONENT"],
    component: a.id,
    path: null,
    home: null,
    key: null,
  });
  assert.equal((await emitted(server, b.id))[0].component, b.id);
});

test("the db and the source survive a server restart on the same data folder", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-restart-"));
  try {
    let first: TestServer | undefined = await startServer({ dataDir });
    let s: any;
    try {
      s = await deploy(first, { component_code: fixture("http-echo.mjs") });
      const endpoint: string = s.configured_props.http.endpoint_url;
      for (let i = 0; i < 2; i++) assert.equal((await hit(endpoint, { method: "POST" })).status, 200);
    } finally {
      await first.close();
      first = undefined;
    }
    const second = await startServer({ dataDir });
    try {
      const again = await second.api("GET", `/v1/sources/${s.id}`);
      assert.equal(again.status, 200, again.text);
      const endpoint: string = again.body.data.configured_props.http.endpoint_url;
      assert.equal(
        endpoint.split("/e/")[1],
        s.configured_props.http.endpoint_url.split("/e/")[1],
        "same endpoint id",
      );
      assert.equal((await hit(endpoint, { method: "POST" })).status, 200);
      assert.deepEqual(
        (await emitted(second, s.id)).map((e) => e.count),
        [1, 2, 3],
      );
    } finally {
      await second.close();
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});
