/**
 * `http_request` props over HTTP: the request-builder value Pipedream's UI stores is checked at deploy,
 * shown in configurable_props and (credentials masked) in the source, and `execute()` in the run sends
 * it through the executor's egress path to a local server, answering like axios does.
 */
import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import { emitted, fixture } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

interface Received {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

let server: TestServer;
let target: http.Server;
let targetUrl: string;
const received: Received[] = [];

before(async () => {
  // Component code reaches loopback only when the operator allows it (egress.test.ts).
  server = await startServer({}, { FOUNT_EXECUTOR_ALLOW_PRIVATE: "true" });
  target = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      received.push({
        method: req.method!,
        url: req.url!,
        headers: req.headers,
        body: Buffer.concat(chunks).toString(),
      });
      if (req.url?.startsWith("/missing")) {
        res
          .writeHead(404, { "content-type": "application/json" })
          .end(JSON.stringify({ error: "no such thing" }));
      } else if (req.url?.startsWith("/text")) {
        res.writeHead(200, { "content-type": "text/plain" }).end("plain words");
      } else {
        res
          .writeHead(200, { "content-type": "application/json" })
          .end(JSON.stringify({ ok: true, n: received.length }));
      }
    });
  });
  await new Promise<void>((resolve) => target.listen(0, "127.0.0.1", resolve));
  targetUrl = `http://127.0.0.1:${(target.address() as AddressInfo).port}`;
});
after(async () => {
  await server.close();
  await new Promise<void>((resolve) => target.close(() => resolve()));
});

async function deployRequest(httpRequest: unknown, s: TestServer = server) {
  return s.api("POST", "/v1/sources", {
    body: { component_code: fixture("http-request-prop.mjs"), configured_props: { httpRequest } },
  });
}

/** Runs the source and returns what the local server received and what the run emitted. */
async function runOnce(sourceId: string, s: TestServer = server): Promise<{ got: Received; event: any }> {
  const before = received.length;
  const run = await s.api("POST", `/v1/sources/${sourceId}/run`);
  assert.equal(run.status, 200, run.text);
  assert.equal(run.body.data.ok, true, JSON.stringify(run.body.data.error));
  assert.equal(received.length, before + 1, "the local server got one request");
  return { got: received.at(-1)!, event: (await emitted(s, sourceId)).at(-1) };
}

test("configurable_props shows an http_request prop with its default", async () => {
  const saved = await server.api("POST", "/v1/components", {
    body: { component_code: fixture("http-request-prop.mjs") },
  });
  assert.equal(saved.status, 200, saved.text);
  assert.deepEqual(saved.body.data.configurable_props, [
    {
      name: "httpRequest",
      type: "http_request",
      label: "HTTP Request Configuration",
      default: { method: "POST" },
    },
  ]);
});

test("execute() sends the configured method, URL with params, headers, raw body and basic auth", async () => {
  const res = await deployRequest({
    url: `${targetUrl}/hooks/a?fixed=1`,
    // No method: the prop's default {method: "POST"} gives it, as on Pipedream.
    headers: [
      { name: "X-Token", value: "abc" },
      { name: "", value: "" },
    ],
    params: [{ name: "q", value: "two words" }],
    body: { mode: "raw", contentType: "application/json", raw: '{"a":1}' },
    auth: { type: "basic", username: "wile", password: "s3cret" },
  });
  assert.equal(res.status, 200, res.text);
  const { got, event } = await runOnce(res.body.data.id);
  assert.equal(got.method, "POST");
  assert.equal(got.url, "/hooks/a?fixed=1&q=two+words");
  assert.equal(got.headers["x-token"], "abc");
  assert.equal(got.headers["content-type"], "application/json");
  assert.equal(got.headers.authorization, `Basic ${Buffer.from("wile:s3cret").toString("base64")}`);
  assert.equal(got.body, '{"a":1}');
  // What execute() resolved to: the response, with the JSON body parsed into data.
  assert.equal(event.status, 200);
  assert.equal(event.data.ok, true);
  assert.equal(event.contentType, "application/json");
  assert.equal(event.url, `${targetUrl}/hooks/a?fixed=1`);
});

test("fields bodies go out as a form or as JSON; bearer auth; header and param objects are accepted", async () => {
  const form = await deployRequest({
    url: `${targetUrl}/form`,
    method: "put",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: {
      mode: "fields",
      fields: [
        { name: "a", value: "1" },
        { name: "b", value: "x y" },
      ],
    },
    auth: { type: "bearer", token: "tok_1" },
  });
  assert.equal(form.status, 200, form.text);
  assert.equal(form.body.data.configured_props.httpRequest.method, "PUT");
  assert.deepEqual(form.body.data.configured_props.httpRequest.headers, [
    { name: "content-type", value: "application/x-www-form-urlencoded" },
  ]);
  const sent = (await runOnce(form.body.data.id)).got;
  assert.equal(sent.method, "PUT");
  assert.equal(sent.body, "a=1&b=x+y");
  assert.equal(sent.headers.authorization, "Bearer tok_1");

  const json = await deployRequest({
    url: `${targetUrl}/json`,
    method: "PATCH",
    body: { fields: [{ name: "a", value: "1" }] },
  });
  const { got } = await runOnce(json.body.data.id);
  assert.equal(got.method, "PATCH");
  assert.equal(got.headers["content-type"], "application/json");
  assert.deepEqual(JSON.parse(got.body), { a: "1" });
});

test("a GET sends no body, a text answer is data as text, and a 404 rejects with the response", async () => {
  const text = await deployRequest({ url: `${targetUrl}/text`, method: "GET", body: { raw: "ignored" } });
  const { got, event } = await runOnce(text.body.data.id);
  assert.equal(got.method, "GET");
  assert.equal(got.body, "");
  assert.equal(event.data, "plain words");

  const missing = await deployRequest({ url: `${targetUrl}/missing`, method: "GET" });
  const failed = (await runOnce(missing.body.data.id)).event;
  assert.deepEqual(failed, {
    failed: "Request failed with status code 404",
    code: "ERR_BAD_REQUEST",
    status: 404,
    data: { error: "no such thing" },
  });
});

test("the source shows its credentials masked, and an update sending the mask back keeps them", async () => {
  const res = await deployRequest({
    url: `${targetUrl}/secret`,
    auth: { type: "basic", username: "wile", password: "s3cret" },
  });
  const source = res.body.data;
  const shown = (await server.api("GET", `/v1/sources/${source.id}`)).body.data.configured_props.httpRequest;
  assert.deepEqual(shown.auth, { type: "basic", username: "wile", password: "**********" });
  assert.ok(!JSON.stringify(shown).includes("s3cret"));

  const updated = await server.api("PUT", `/v1/sources/${source.id}`, {
    body: { configured_props: { httpRequest: { ...shown, method: "DELETE" } } },
  });
  assert.equal(updated.status, 200, updated.text);
  const { got } = await runOnce(source.id);
  assert.equal(got.method, "DELETE");
  assert.equal(got.headers.authorization, `Basic ${Buffer.from("wile:s3cret").toString("base64")}`);

  // New code without props carries the stored value over, sealed credential included.
  const renamed = await server.api("PUT", `/v1/sources/${source.id}`, {
    body: { component_code: fixture("http-request-prop.mjs").replace('"1.0.0"', '"1.0.1"') },
  });
  assert.equal(renamed.status, 200, renamed.text);
  assert.equal(
    (await runOnce(source.id)).got.headers.authorization,
    `Basic ${Buffer.from("wile:s3cret").toString("base64")}`,
  );
});

test("bad http_request values are refused at deploy with props_invalid naming the prop", async () => {
  const cases: Array<[unknown, RegExp]> = [
    [{ method: "GET" }, /httpRequest\.url is required/],
    [{ url: "ftp://example.com/x" }, /http or https URL/],
    [{ url: "not a url" }, /is not a URL/],
    [{ url: `${targetUrl}/`, method: "BREW" }, /method must be one of/],
    [{ url: `${targetUrl}/`, headers: "x-a: 1" }, /headers must be a list/],
    [{ url: `${targetUrl}/`, headers: [{ name: "X-A", value: "1\r\nX-B: 2" }] }, /line breaks/],
    [{ url: `${targetUrl}/`, headers: [{ name: "bad name", value: "1" }] }, /not a valid header name/],
    [{ url: `${targetUrl}/`, params: [{ value: "1" }] }, /params\[0\]\.name must be a string/],
    [{ url: `${targetUrl}/`, body: { mode: "xml" } }, /body\.mode must be "fields" or "raw"/],
    [{ url: `${targetUrl}/`, auth: { type: "bearer" } }, /needs a token/],
    [{ url: `${targetUrl}/`, auth: { type: "digest", username: "u" } }, /auth\.type must be/],
    [42, /must be an object/],
  ];
  for (const [value, message] of cases) {
    const res = await deployRequest(value);
    assert.equal(res.status, 422, `${JSON.stringify(value)}: ${res.text}`);
    assert.equal(res.body.code, "props_invalid");
    assert.equal(res.body.details.prop, "httpRequest");
    assert.match(res.body.error, message);
  }
  // Without a value the default has no URL: the prop is required.
  const none = await server.api("POST", "/v1/sources", {
    body: { component_code: fixture("http-request-prop.mjs") },
  });
  assert.equal(none.status, 422);
  assert.match(none.body.error, /httpRequest\.url is required/);
});

test("execute() goes through the egress policy: loopback is refused by default", async () => {
  const guarded = await startServer();
  try {
    const res = await deployRequest({ url: `${targetUrl}/guarded`, method: "GET" }, guarded);
    assert.equal(res.status, 200, res.text);
    const before = received.length;
    const run = await guarded.api("POST", `/v1/sources/${res.body.data.id}/run`);
    assert.equal(run.body.data.ok, false);
    assert.equal(run.body.data.error.code, "EGRESS_REFUSED");
    assert.match(
      run.body.data.error.message,
      /GET http:\/\/127\.0\.0\.1:\d+\/guarded failed: .*refused to connect/,
    );
    assert.equal(received.length, before, "the local server got nothing");
  } finally {
    await guarded.close();
  }
});
