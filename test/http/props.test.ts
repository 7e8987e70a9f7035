/**
 * Props over HTTP: every prop type of the spec (with its array form where allowed), app props with
 * `$auth` and methods, interfaces and the db service, optional and default values, static and async
 * options, secrets, propDefinition reuse, and the 64 KB limit.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { deploy, fixture, runAndRead } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
let componentId: string;
let accountId: string;
const credentials = { token: "tok_0123456789", subdomain: "wile" };

before(async () => {
  server = await startServer();
  const saved = await server.api("POST", "/v1/components", {
    body: { component_code: fixture("all-props.mjs") },
  });
  assert.equal(saved.status, 200, saved.text);
  componentId = saved.body.data.id;
  const account = await server.api("POST", "/v1/accounts", {
    body: { app: "acme", name: "Acme prod", credentials },
  });
  assert.equal(account.status, 200, account.text);
  accountId = account.body.data.id;
});
after(() => server.close());

/** A valid configuration of every prop that needs one. */
function validProps(): Record<string, unknown> {
  return {
    acme: { authProvisionId: accountId },
    title: "Weekly report",
    tags: ["a", "b"],
    limit: 10,
    ports: [80, 443],
    enabled: true,
    flags: [true, false],
    filter: { status: "open", nested: { n: 1 } },
    apiToken: "sk_live_secret",
    channel: "C2",
  };
}

async function deployWith(props: Record<string, unknown>) {
  return server.api("POST", "/v1/sources", { body: { component_id: componentId, configured_props: props } });
}

test("configurable_props describes every prop: type, label, description, options, min/max, default, app", async () => {
  const res = await server.api("GET", `/v1/components/${componentId}`);
  const props = Object.fromEntries(
    res.body.data.configurable_props.map((p: { name: string }) => [p.name, p]),
  ) as Record<string, any>;
  assert.deepEqual(Object.keys(props), [
    "acme",
    "http",
    "timer",
    "db",
    "title",
    "tags",
    "limit",
    "ports",
    "enabled",
    "flags",
    "filter",
    "color",
    "size",
    "note",
    "maybe",
    "apiToken",
    "team",
    "channel",
    "region",
  ]);
  assert.equal(props.acme.type, "app");
  assert.equal(props.acme.app, "acme");
  assert.equal(props.http.type, "$.interface.http");
  assert.deepEqual(props.timer.default, { intervalSeconds: 900 });
  assert.equal(props.db.type, "$.service.db");
  assert.equal(props.title.label, "Title");
  assert.equal(props.title.description, "Shown in **bold**");
  assert.equal(props.tags.type, "string[]");
  assert.equal(props.limit.min, 1);
  assert.equal(props.limit.max, 10);
  assert.equal(props.ports.type, "integer[]");
  assert.equal(props.flags.type, "boolean[]");
  assert.equal(props.filter.type, "object");
  assert.deepEqual(props.color.options, ["red", "green"]);
  assert.deepEqual(props.size.options, [
    { label: "Small", value: 1 },
    { label: "Large", value: 2 },
  ]);
  assert.equal(props.note.optional, true);
  assert.equal(props.note.default, "none");
  assert.equal(props.apiToken.secret, true);
});

test("a source gets the value of every prop type, app $auth and app methods, the endpoint and the db", async () => {
  const res = await deployWith(validProps());
  assert.equal(res.status, 200, res.text);
  const source = res.body.data;
  const seen = await runAndRead(server, source.id);
  assert.deepEqual(seen, {
    title: "Weekly report",
    tags: ["a", "b"],
    limit: 10,
    ports: [80, 443],
    enabled: true,
    flags: [true, false],
    filter: { status: "open", nested: { n: 1 } },
    color: null,
    size: null,
    note: "none",
    hasMaybe: false,
    apiTokenReversed: "terces_evil_ks",
    channel: "C2",
    authorization: "Bearer tok_0123456789",
    baseUrl: "https://wile.acme.test/api",
    auth: credentials,
    endpoint: source.configured_props.http.endpoint_url,
    timerType: "$.interface.timer",
    hasDb: true,
  });
});

test("GET shows the timer and the endpoint normalised and the app reference, never the secret", async () => {
  const created = (await deployWith(validProps())).body.data;
  for (const shown of [
    created,
    (await server.api("GET", `/v1/sources/${created.id}`)).body.data,
    (await server.api("GET", "/v1/users/me/sources?limit=100")).body.data.find(
      (s: { id: string }) => s.id === created.id,
    ),
  ]) {
    const p = shown.configured_props;
    assert.deepEqual(p.timer, { cron: null, interval_seconds: 900 });
    assert.match(p.http.endpoint_url, /^http:\/\/127\.0\.0\.1:\d+\/e\/[a-z0-9]+$/);
    assert.deepEqual(p.acme, { authProvisionId: accountId });
    assert.notEqual(p.apiToken, "sk_live_secret");
    assert.match(p.apiToken, /^\*+$/);
    assert.equal(JSON.stringify(shown).includes("sk_live_secret"), false);
    assert.equal(p.note, "none", "the default is stored as the value");
  }
  // Stored sealed: no file of the server's data folder holds the secret in clear.
  for (const file of readdirSync(server.dataDir, { recursive: true, withFileTypes: true })) {
    if (!file.isFile()) continue;
    const bytes = readFileSync(path.join(file.parentPath, file.name));
    assert.equal(bytes.includes("sk_live_secret"), false, `${file.name} holds the secret in clear`);
  }
});

test("a secret survives an update that does not give it again, and is replaced when given", async () => {
  const source = (await deployWith(validProps())).body.data;
  const { apiToken: _, ...rest } = validProps();
  const kept = await server.api("PUT", `/v1/sources/${source.id}`, {
    body: { configured_props: { ...rest, title: "v2" } },
  });
  assert.equal(kept.status, 200, kept.text);
  assert.equal(JSON.stringify(kept.body).includes("sk_live_secret"), false);
  assert.equal((await runAndRead(server, source.id)).apiTokenReversed, "terces_evil_ks");
  const replaced = await server.api("PUT", `/v1/sources/${source.id}`, {
    body: { configured_props: { ...rest, apiToken: "sk_new" } },
  });
  assert.equal(replaced.status, 200, replaced.text);
  assert.equal(replaced.body.data.configured_props.apiToken.includes("sk_new"), false);
  assert.equal((await runAndRead(server, source.id)).apiTokenReversed, "wen_ks");
});

test("optional props may be left out; given options are used", async () => {
  const source = (await deployWith({ ...validProps(), color: "green", size: 2, maybe: "yes", note: "mine" }))
    .body.data;
  const seen = await runAndRead(server, source.id);
  assert.equal(seen.color, "green");
  assert.equal(seen.size, 2);
  assert.equal(seen.hasMaybe, true);
  assert.equal(seen.note, "mine");
});

const refused: Array<[string, Record<string, unknown>, string]> = [
  ["a missing required prop", { title: undefined }, "title"],
  ["a string prop given a number", { title: 5 }, "title"],
  ["a string[] prop given a string item list with a number", { tags: ["a", 1] }, "tags"],
  ["an integer below min", { limit: 0 }, "limit"],
  ["an integer above max", { limit: 11 }, "limit"],
  ["a non-integer number", { limit: 2.5 }, "limit"],
  ["an integer[] with a string item", { ports: [80, "http"] }, "ports"],
  ["a boolean given a number", { enabled: 1 }, "enabled"],
  ["a boolean[] with a string item", { flags: [true, "maybe"] }, "flags"],
  ["an object given an array", { filter: [1, 2] }, "filter"],
  ["a string outside its static options", { color: "blue" }, "color"],
  ["an integer outside its {label, value} options", { size: 3 }, "size"],
  ["a prop the component does not have", { nonsense: 1 }, "nonsense"],
  ["an app prop without authProvisionId", { acme: "tok" }, "acme"],
  ["an app prop with an unknown account", { acme: { authProvisionId: "apn_nope" } }, "acme"],
  ["a timer with a 4-field cron", { timer: { cron: "0 9 * *" } }, "timer"],
  ["a timer with an unknown timezone", { timer: { cron: "0 9 * * *", timezone: "Mars/Olympus" } }, "timer"],
  ["a timer with intervalSeconds 0", { timer: { intervalSeconds: 0 } }, "timer"],
  ["a value over 64 KB", { title: "x".repeat(64 * 1024 + 1) }, "title"],
  ["an object over 64 KB", { filter: { blob: "y".repeat(70_000) } }, "filter"],
];

for (const [label, change, prop] of refused) {
  test(`${label} is refused with 422 naming the prop`, async () => {
    const props = { ...validProps(), ...change };
    for (const [k, v] of Object.entries(change)) if (v === undefined) delete props[k];
    const res = await deployWith(props);
    assert.equal(res.status, 422, res.text.slice(0, 300));
    assert.equal(res.body.code, "props_invalid");
    assert.equal(res.body.details?.prop, prop);
  });
}

test("the 64 KB limit counts bytes: a multi-byte value over 64 KB of UTF-8 is refused", async () => {
  // 40,000 characters, 80,000 bytes.
  const res = await deployWith({ ...validProps(), title: "é".repeat(40_000) });
  assert.equal(res.status, 422, res.text.slice(0, 300));
  assert.equal(res.body.details?.prop, "title");
});

test("a value of exactly 64 KB is accepted", async () => {
  // JSON of the string adds two quotes.
  const res = await deployWith({ ...validProps(), title: "x".repeat(64 * 1024 - 2) });
  assert.equal(res.status, 200, res.text.slice(0, 300));
});

test("an app prop is refused an account of another app and another tenant's account", async () => {
  const other = await server.api("POST", "/v1/accounts", {
    body: { app: "globex", credentials: { token: "g" } },
  });
  const wrongApp = await deployWith({ ...validProps(), acme: { authProvisionId: other.body.data.id } });
  assert.equal(wrongApp.status, 422);
  assert.equal(wrongApp.body.details.prop, "acme");

  const stranger = await server.createUser("props-stranger");
  const theirs = await server.api("POST", "/v1/accounts", {
    key: stranger.key,
    body: { app: "acme", credentials: { token: "theirs", subdomain: "x" } },
  });
  const foreign = await deployWith({ ...validProps(), acme: { authProvisionId: theirs.body.data.id } });
  assert.equal(foreign.status, 422);
  assert.equal(foreign.body.details.prop, "acme");
});

test("numeric strings are accepted for integer props, as HTML forms send them", async () => {
  const res = await deployWith({ ...validProps(), limit: "7", ports: ["8080"] });
  assert.equal(res.status, 200, res.text);
  const seen = await runAndRead(server, res.body.data.id);
  assert.equal(seen.limit, 7);
  assert.deepEqual(seen.ports, [8080]);
});

test("a propDefinition copies the app's definition and the local keys override it", async () => {
  const res = await server.api("GET", `/v1/components/${componentId}`);
  const channel = res.body.data.configurable_props.find((p: { name: string }) => p.name === "channel");
  assert.equal(channel.type, "string");
  assert.equal(channel.label, "Channel", "label comes from the app");
  assert.equal(channel.description, "Overridden: the channel whose messages are emitted");
});

test("async options of a propDefinition page with prev_context and run with the app's $auth and input", async () => {
  const url = `/v1/components/${componentId}/props/channel/options`;
  const configured = { acme: { authProvisionId: accountId }, team: "ops" };
  const first = await server.api("POST", url, { body: { page: 0, configured_props: configured } });
  assert.equal(first.status, 200, first.text);
  assert.deepEqual(first.body.data.options, [
    { label: "ops #0 (14)", value: "C0" },
    { label: "ops #1 (14)", value: "C1" },
  ]);
  assert.deepEqual(first.body.data.context, { nextPageToken: 2, page: 0 });
  const second = await server.api("POST", url, {
    body: { page: 1, prev_context: first.body.data.context, configured_props: configured },
  });
  assert.deepEqual(
    second.body.data.options.map((o: { value: string }) => o.value),
    ["C2", "C3"],
  );
  assert.deepEqual(second.body.data.context, { nextPageToken: 4, page: 1 });

  // By key too.
  const byKey = await server.api("POST", "/v1/components/fount-test-all-props/props/channel/options", {
    body: { page: 2, prev_context: second.body.data.context, configured_props: configured },
  });
  assert.deepEqual(
    byKey.body.data.options.map((o: { value: string }) => o.value),
    ["C4", "C5"],
  );
  assert.equal(byKey.body.data.context.nextPageToken, null);
});

test("async options of a component prop receive page; static options are listed as they are", async () => {
  const base = `/v1/components/${componentId}/props`;
  const first = await server.api("POST", `${base}/region/options`, { body: {} });
  assert.equal(first.status, 200, first.text);
  assert.deepEqual(first.body.data.options, ["eu", "us"]);
  assert.deepEqual(
    (await server.api("POST", `${base}/region/options`, { body: { page: 1 } })).body.data.options,
    ["ap"],
  );
  assert.deepEqual((await server.api("POST", `${base}/color/options`, { body: {} })).body.data.options, [
    "red",
    "green",
  ]);
  assert.equal((await server.api("POST", `${base}/nothing/options`, { body: {} })).status, 404);
});

test("timer props take intervalSeconds or a 5- or 6-field cron with a timezone", async () => {
  const cases: Array<[Record<string, unknown>, Record<string, unknown>]> = [
    [{ intervalSeconds: 60 }, { cron: null, interval_seconds: 60 }],
    [
      { cron: "0 9 * * 1-5", timezone: "Europe/Paris" },
      { cron: "0 9 * * 1-5", interval_seconds: null, timezone: "Europe/Paris" },
    ],
    [{ cron: "*/30 * * * * *" }, { cron: "*/30 * * * * *", interval_seconds: null }],
  ];
  for (const [given, shown] of cases) {
    const res = await deployWith({ ...validProps(), timer: given });
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.body.data.configured_props.timer, shown);
  }
});

test("the HTTP interface works as the string shorthand and as an object with customResponse", async () => {
  const shorthand = await deploy(server, { component_code: fixture("http-echo.mjs") });
  assert.ok(shorthand.configured_props.http.endpoint_url);
  const object = await deploy(server, { component_code: fixture("responder.mjs") });
  assert.ok(object.configured_props.http.endpoint_url);
  assert.notEqual(object.configured_props.http.endpoint_url, shorthand.configured_props.http.endpoint_url);
  const saved = await server.api("GET", `/v1/components/${object.component_id}`);
  const http = saved.body.data.configurable_props.find((p: { name: string }) => p.name === "http");
  assert.equal(http.type, "$.interface.http");
  assert.equal(http.customResponse, true);
});
