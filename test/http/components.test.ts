/**
 * Saved components over HTTP: POST /v1/components from code or URL, GET by key or ID, the three code
 * formats, the definition checks (422 with the loader's message), code_hash and configurable_props.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import { deploy, emitted, fixture } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
/** Serves fixture files at /<name>, the way a raw GitHub URL would. */
let files: http.Server;
let filesUrl: string;

before(async () => {
  // The fixture files are served on loopback, which component_url may reach only when allowed.
  server = await startServer({ webhookAllowPrivate: true });
  files = http.createServer((req, res) => {
    const name = (req.url ?? "/").slice(1);
    if (!/^[\w.-]+$/.test(name)) {
      res.writeHead(404).end();
      return;
    }
    try {
      const code = fixture(name);
      res.writeHead(200, { "content-type": "text/plain; charset=utf-8" }).end(code);
    } catch {
      res.writeHead(404).end("not found");
    }
  });
  await new Promise<void>((resolve) => files.listen(0, "127.0.0.1", resolve));
  filesUrl = `http://127.0.0.1:${(files.address() as AddressInfo).port}`;
});
after(async () => {
  await new Promise((resolve) => files.close(resolve));
  await server.close();
});

const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");

test("an ESM component is saved with its code, its SHA-256 code_hash and its configurable props", async () => {
  const code = fixture("http-echo.mjs");
  const res = await server.api("POST", "/v1/components", { body: { component_code: code } });
  assert.equal(res.status, 200, res.text);
  const c = res.body.data;
  assert.match(c.id, /^sc_[A-Za-z0-9]+$/);
  assert.equal(c.code, code);
  assert.equal(c.code_hash, sha256(code));
  assert.equal(c.name, "HTTP Echo");
  assert.equal(c.version, "0.1.0");
  assert.equal(c.key, "fount-test-http-echo");
  assert.equal(typeof c.created_at, "number");
  assert.equal(typeof c.updated_at, "number");
  assert.ok(c.created_at > 1_600_000_000 && c.created_at < 10_000_000_000, "created_at is in epoch seconds");
  assert.deepEqual(
    c.configurable_props.map((p: { name: string; type: string }) => [p.name, p.type]),
    [
      ["http", "$.interface.http"],
      ["db", "$.service.db"],
    ],
  );
});

test("a component is found by its key and by its sc_ ID, and only by its owner", async () => {
  const code = fixture("greeter.ts");
  const saved = (await server.api("POST", "/v1/components", { body: { component_code: code } })).body.data;
  const byId = await server.api("GET", `/v1/components/${saved.id}`);
  assert.equal(byId.status, 200);
  assert.deepEqual(byId.body.data, saved);
  const byKey = await server.api("GET", "/v1/components/fount-test-greeter");
  assert.equal(byKey.status, 200);
  assert.equal(byKey.body.data.id, saved.id);
  assert.equal(byKey.body.data.code_hash, sha256(code));

  const stranger = await server.createUser("component-stranger");
  assert.equal((await server.api("GET", `/v1/components/${saved.id}`, { key: stranger.key })).status, 404);
  assert.equal(
    (await server.api("GET", "/v1/components/fount-test-greeter", { key: stranger.key })).status,
    404,
  );
  assert.equal((await server.api("GET", "/v1/components/sc_doesnotexist")).status, 404);
});

test("CommonJS code (module.exports) is saved and runs", async () => {
  const res = await server.api("POST", "/v1/components", { body: { component_code: fixture("counter.js") } });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.data.name, "Counter");
  assert.deepEqual(
    res.body.data.configurable_props.find((p: { name: string }) => p.name === "who"),
    { name: "who", type: "string", label: "Who", optional: true, default: "world" },
  );
  const source = await deploy(server, { component_id: res.body.data.id });
  const run = await server.api("POST", `/v1/sources/${source.id}/run`, { body: { event: { n: 1 } } });
  assert.equal(run.status, 200, run.text);
  assert.deepEqual((await emitted(server, source.id)).at(-1), {
    runs: 1,
    greeting: "hello world",
    event: { n: 1 },
  });
});

test("TypeScript code is saved with its types stripped and runs", async () => {
  const code = fixture("greeter.ts");
  assert.match(code, /interface Greeting/);
  const res = await server.api("POST", "/v1/components", { body: { component_code: code } });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.data.code, code, "the stored code is the TypeScript as sent");
  const source = await deploy(server, {
    component_id: res.body.data.id,
    configured_props: { name: "ts", times: 2 },
  });
  await server.api("POST", `/v1/sources/${source.id}/run`);
  assert.deepEqual((await emitted(server, source.id)).at(-1), { text: "hi tshi ts", length: 10 });
});

test("a component_url on a loopback or private address is refused unless the operator allows it", async () => {
  const guarded = await startServer();
  try {
    for (const url of [`${filesUrl}/counter.js`, "http://10.0.0.1/x.js", "http://[::1]:1/x.js"]) {
      const res = await guarded.api("POST", "/v1/components", { body: { component_url: url } });
      assert.equal(res.status, 400, `${url}: ${res.text}`);
      assert.equal(res.body.details?.field, "component_url");
      assert.match(res.body.error, /refused/);
    }
  } finally {
    await guarded.close();
  }
});

test("component_url alone: the code is fetched from the URL and the URL is kept", async () => {
  const url = `${filesUrl}/counter.js`;
  const res = await server.api("POST", "/v1/components", { body: { component_url: url } });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.data.code, fixture("counter.js"));
  assert.equal(res.body.data.code_hash, sha256(fixture("counter.js")));
  assert.equal(res.body.data.component_url, url);
});

test("component_code wins over component_url, which is kept only as metadata", async () => {
  const url = `${filesUrl}/counter.js`;
  const code = fixture("greeter.ts");
  const res = await server.api("POST", "/v1/components", {
    body: { component_code: code, component_url: url },
  });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.data.name, "Greeter");
  assert.equal(res.body.data.code, code);
  assert.equal(res.body.data.component_url, url);
  // Not even fetched: a URL that would fail does not matter when code is given.
  const dead = await server.api("POST", "/v1/components", {
    body: { component_code: code, component_url: `${filesUrl}/missing.js` },
  });
  assert.equal(dead.status, 200, dead.text);
});

test("a component_url that does not answer with code is refused with a message naming it", async () => {
  const res = await server.api("POST", "/v1/components", {
    body: { component_url: `${filesUrl}/missing.js` },
  });
  assert.equal(res.status, 400, res.text);
  assert.equal(res.body.details.field, "component_url");
  assert.match(res.body.error, /404/);
});

test("a request with neither component_code nor component_url is a 400", async () => {
  const res = await server.api("POST", "/v1/components", { body: {} });
  assert.equal(res.status, 400);
  assert.equal(res.body.code, "invalid_parameter");
});

const invalid: Array<{ label: string; code: string; message: RegExp; line?: number }> = [
  {
    label: "a definition without name",
    code: `export default { version: "1.0.0", run() {} };\n`,
    message: /name/,
  },
  {
    label: "a definition without version",
    code: `export default { name: "No version", run() {} };\n`,
    message: /version/,
  },
  {
    label: "a source without run (and no timer)",
    code: `export default { name: "No run", version: "1.0.0", props: { db: "$.service.db" } };\n`,
    message: /run/,
  },
  {
    label: "an unknown prop type",
    code: `export default {\n  name: "Odd prop",\n  version: "1.0.0",\n  props: { when: { type: "datetime" } },\n  run() {},\n};\n`,
    message: /when[\s\S]*datetime|datetime[\s\S]*when/,
  },
  {
    label: "a dedupe strategy that does not exist",
    code: `export default { name: "Bad dedupe", version: "1.0.0", dedupe: "newest", run() {} };\n`,
    message: /dedupe[\s\S]*newest/,
  },
  {
    label: "a syntax error",
    code: `export default {\n  name: "Broken",\n  version: "1.0.0",\n  run() { this.$emit({ a: 1 ); },\n};\n`,
    message: /Expected|Unexpected|SyntaxError/,
    line: 4,
  },
];

for (const c of invalid) {
  test(`${c.label} is refused with 422 and the loader's message`, async () => {
    const res = await server.api("POST", "/v1/components", { body: { component_code: c.code } });
    assert.equal(res.status, 422, res.text);
    assert.equal(res.body.code, "component_invalid");
    assert.match(res.body.error, c.message);
    if (c.line !== undefined) {
      assert.equal(res.body.details?.line, c.line, `details: ${JSON.stringify(res.body.details)}`);
      assert.equal(typeof res.body.details.column, "number");
    }
    // Nothing was saved: deploying the same code fails the same way.
    const deployed = await server.api("POST", "/v1/sources", { body: { component_code: c.code } });
    assert.equal(deployed.status, 422);
  });
}

test("a component that throws while loading is refused with 422 and the thrown message", async () => {
  const code = `const x = 1;\nthrow new Error("boom at load");\nexport default { name: "x", version: "1", run() {} };\n`;
  const res = await server.api("POST", "/v1/components", { body: { component_code: code } });
  assert.equal(res.status, 422, res.text);
  assert.equal(res.body.code, "component_invalid");
  assert.match(res.body.error, /boom at load/);
  assert.equal(typeof res.body.details?.line, "number");
});

test("a component that throws while loading is refused with the line of the throw in the user's code", async () => {
  const code = `const x = 1;\nthrow new Error("boom at load");\nexport default { name: "x", version: "1", run() {} };\n`;
  const res = await server.api("POST", "/v1/components", { body: { component_code: code } });
  assert.equal(res.status, 422, res.text);
  assert.equal(res.body.details?.line, 2, `details: ${JSON.stringify(res.body.details)}`);
});
