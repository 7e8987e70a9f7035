/**
 * The NUL character (U+0000), which PostgreSQL's text refuses and SQLite stores: an identifier, a name or
 * any other typed field of the API holding one is refused with a 400 naming it; an event's payload, what
 * a component emits and logs, and what an endpoint hit carries are stored and read back exactly; a channel
 * name cannot hold it. An unpaired surrogate in a JSON body (`\ud800`), which PostgreSQL's jsonb refuses,
 * is refused alike. The same on both drivers (test/http-postgres/nul-characters.test.ts).
 */
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, test } from "node:test";
import { deploy, emitted, events, fixture, hit } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";
import { assertApiError } from "./openapi-walk.ts";

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(() => server.close());

test("a NUL character in a field of the API is refused with a 400 naming the field", async () => {
  const source = await deploy(server, { component_code: fixture("http-echo.mjs") });
  const refused: Array<[string, string, Parameters<TestServer["api"]>[2], string]> = [
    ["PUT", `/v1/sources/${source.id}`, { body: { component_id: "sc_\u0000" } }, "component_id"],
    ["PUT", `/v1/sources/${source.id}`, { body: { name: "new\u0000name" } }, "name"],
    [
      "PUT",
      `/v1/sources/${source.id}`,
      { body: { configured_props: { a: ["\u0000"] } } },
      "configured_props.a[0]",
    ],
    ["POST", "/v1/webhooks", { body: { url: "https://example.com/", name: "\u0000" } }, "name"],
    ["POST", "/v1/webhooks?description=%00", { body: { url: "https://example.com/" } }, "description"],
    ["GET", `/v1/sources/${source.id}?include=id%00`, {}, "include"],
    ["GET", "/v1/sources/dc_%00", {}, "id"],
    ["POST", "/v1/workflows", { body: { name: "flow", "unknown\u0000": 1 } }, "unknown\\u0000"],
  ];
  for (const [method, path, options, field] of refused) {
    const res = await server.api(method, path, options);
    assertApiError(res, { status: 400, code: "invalid_parameter" }, `${method} ${path}`);
    assert.equal(res.body.details.field, field, `${method} ${path}: ${res.text}`);
    assert.match(res.body.error, /NUL character \(U\+0000\)/);
  }
  // Nothing was changed by the refused requests.
  const read = await server.api("GET", `/v1/sources/${source.id}`);
  assert.equal(read.body.data.name, source.name);
  assert.equal(read.body.data.component_id, source.component_id);
});

test("an unpaired surrogate in a field of a JSON body is refused with a 400 naming the field; an event's payload keeps it", async () => {
  const source = await deploy(server, { component_code: fixture("emitter.mjs") });
  const hook = await server.api("POST", "/v1/webhooks", { body: { url: "https://example.com/" } });
  assert.equal(hook.status, 200, hook.text);
  // Raw JSON text: `\ud800` is the escape of a lone surrogate, which JSON.parse gives as it is.
  const refused: Array<[string, string, string, string]> = [
    // The event search's `where` reached PostgreSQL's jsonb, which refused it: a 500.
    [
      "POST",
      `/v1/sources/${source.id}/events/replay`,
      `{"listener_id":"${hook.body.data.id}","where":"body.k:\\ud800"}`,
      "where",
    ],
    [
      "POST",
      `/v1/sources/${source.id}/events/replay`,
      `{"listener_id":"${hook.body.data.id}","q":"abc\\udfff"}`,
      "q",
    ],
    ["PUT", `/v1/sources/${source.id}`, '{"name":"a\\ud83d"}', "name"],
    ["PUT", `/v1/sources/${source.id}`, '{"configured_props":{"a":["\\udc00x"]}}', "configured_props.a[0]"],
    ["POST", "/v1/workflows", '{"name":"flow","unknown\\ud800":1}', "unknown\\ud800"],
  ];
  for (const [method, path, raw, field] of refused) {
    const res = await server.api(method, path, { raw });
    assertApiError(res, { status: 400, code: "invalid_parameter" }, `${method} ${path} ${raw}`);
    assert.equal(res.body.details.field, field, `${method} ${path}: ${res.text}`);
    assert.match(res.body.error, /unpaired surrogate/);
  }
  const read = await server.api("GET", `/v1/sources/${source.id}`);
  assert.equal(read.body.data.name, source.name, "nothing was changed by the refused requests");
  // A pair is a character like any other.
  const paired = await server.api("PUT", `/v1/sources/${source.id}`, { raw: '{"name":"a\\ud83d\\ude00"}' });
  assert.equal(paired.status, 200, paired.text);
  assert.equal(paired.body.data.name, "a\u{1F600}");

  // A field that takes any JSON value is stored as JSON, where the escape is kept and read back.
  const run = await server.api("POST", `/v1/sources/${source.id}/run`, {
    raw: '{"event":{"emits":[{"event":{"k":"\\ud800"}}]}}',
  });
  assert.equal(run.status, 200, run.text);
  const [stored] = await events(server, source.id);
  assert.deepEqual(stored.event, { k: "\ud800" });
});

test("an event's payload given through the API keeps its NUL characters, as sent", async () => {
  const source = await deploy(server, { component_code: fixture("emitter.mjs") });
  const payload = { "ke\u0000y": "va\u0000lue", list: ["\u0000", { deep: "a\u0000" }] };
  const run = await server.api("POST", `/v1/sources/${source.id}/run`, {
    body: { event: { emits: [{ event: payload, meta: { id: "i\u0000d", summary: "s\u0000" } }] } },
  });
  assert.equal(run.status, 200, run.text);
  const [stored] = await events(server, source.id);
  assert.deepEqual(stored.event, payload);
  assert.equal(stored.metadata.id, "i\u0000d");
  assert.equal(stored.metadata.summary, "s\u0000");

  const flow = await server.api("POST", "/v1/workflows", { body: { name: "nul-flow" } });
  assert.equal(flow.status, 200, flow.text);
  const emit = await server.api("POST", `/v1/workflows/${flow.body.data.id}/emits`, {
    body: { event: payload },
  });
  assert.equal(emit.status, 200, emit.text);
  const summaries = await server.api(
    "GET",
    `/v1/workflows/${flow.body.data.id}/event_summaries?expand=event`,
  );
  assert.deepEqual(summaries.body.data[0].event, { raw_event: payload });
});

test("what a component emits, logs and keeps with NUL characters, and the hit that ran it, read back exactly", async () => {
  const source = await deploy(server, { component_code: fixture("nul-emitter.mjs") });
  const url = source.configured_props.http.endpoint_url;
  const body = JSON.stringify({ text: "a\u0000b", "k\u0000": 1 });
  const first = await hit(`${url}/pa%00th?q=%00`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-note": "no NUL can go in a header" },
    body,
  });
  assert.equal(first.status, 200, first.text);
  // Raw bytes, not JSON: a NUL byte in a text body.
  const second = await hit(url, {
    method: "POST",
    headers: { "content-type": "text/plain" },
    body: Buffer.from([0x61, 0x00, 0x62]),
  });
  assert.equal(second.status, 200, second.text);

  const [one, two] = await emitted(server, source.id);
  assert.equal(one.text, "x\u0000y");
  assert.deepEqual(one["ke\u0000y"], ["\u0000"]);
  assert.equal(one.hit.bodyRaw, body);
  assert.deepEqual(one.hit.body, { text: "a\u0000b", "k\u0000": 1 });
  assert.deepEqual(one.hit.query, { q: "\u0000" });
  // The path is kept as it came, percent-encoded.
  assert.equal(one.hit.path, "/pa%00th");
  assert.equal(one.before, null);
  assert.equal(two.hit.bodyRaw, "a\u0000b");
  // The db kept a key and a value holding NUL from one run to the next.
  assert.deepEqual(two.before, { v: "v\u0000alue" });
  const [latest] = await events(server, source.id);
  assert.equal(latest.metadata.id, "id\u0000");
  assert.equal(latest.metadata.summary, "sum\u0000mary");
  const logs = await events(server, source.id, "$logs");
  assert.ok(logs.length >= 2);
  for (const log of logs) assert.equal(log.event.message, "a log line with \u0000 inside");
});

test("a header holding a NUL byte is refused by the HTTP parser with a 400, never a 5xx", async () => {
  const source = await deploy(server, { component_code: fixture("http-echo.mjs") });
  const { pathname, port } = new URL(source.configured_props.http.endpoint_url);
  const answer = await new Promise<string>((resolve, reject) => {
    const socket = net.connect(Number(port), "127.0.0.1", () => {
      socket.end(
        `POST ${pathname} HTTP/1.1\r\nhost: x\r\nx-nul: a\u0000b\r\ncontent-length: 0\r\n\r\n`,
        "latin1",
      );
    });
    let text = "";
    socket.on("data", (c: Buffer) => {
      text += c.toString("latin1");
    });
    socket.on("end", () => resolve(text));
    socket.on("error", reject);
  });
  assert.match(answer, /^HTTP\/1\.1 400 /);
  assert.equal((await emitted(server, source.id)).length, 0);
});

test("a component whose name, key or version holds a NUL character is refused at deploy", async () => {
  for (const field of ["name", "key", "version"]) {
    const code = `export default { key: "fount-test-nul-meta", name: "n", version: "0.1.0", props: { http: "$.interface.http" }, ${field}: "a\\u0000b", async run() {} }`;
    const res = await server.api("POST", "/v1/sources", { body: { component_code: code } });
    assertApiError(res, { status: 422, code: "component_invalid" }, field);
    assert.match(res.body.error, new RegExp(`\`${field}\` must not contain the NUL character`));
  }
});
