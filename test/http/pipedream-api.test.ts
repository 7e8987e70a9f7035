/**
 * Component code that calls Pipedream's own API at https://api.pipedream.com/v1 (hard-coded in
 * Pipedream's app files) is answered by this Fount's API, over the executor's IPC rather than the
 * network, as the same request with the credentials the component sent. FOUNT_PIPEDREAM_API=false
 * turns that off, and the request then goes to the network as before.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { deploy, emitted, fixture, hit } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(() => server.close());

let n = 0;
const unique = (prefix: string) => `${prefix}-${process.pid}-${++n}`;

/** Deploys the caller as `owner` with `apiKey` as its secret prop; returns its id and endpoint. */
async function caller(on: TestServer, owner: string, apiKey: string): Promise<{ id: string; url: string }> {
  const source = await deploy(
    on,
    { component_code: fixture("pipedream-api-caller.mjs"), configured_props: { apiKey } },
    owner,
  );
  return { id: source.id, url: source.configured_props.http.endpoint_url };
}

async function call(url: string, query = ""): Promise<any> {
  const res = await hit(`${url}?${query}`, { method: "POST" });
  assert.equal(res.status, 200, res.text);
  return res.body;
}

test("a component's axios and fetch calls to https://api.pipedream.com/v1/users/me answer with the key's user", async () => {
  const user = await server.createUser(unique("caller"));
  const source = await caller(server, user.key, user.key);
  const got = await call(source.url, "do=me");
  assert.equal(got.axios.ok, true, JSON.stringify(got.axios));
  assert.equal(got.axios.data.data.id, user.id);
  assert.equal(got.fetch.status, 200, JSON.stringify(got.fetch));
  assert.equal(got.fetch.data.data.id, user.id);
  // What the source emitted is what it got.
  const [event] = await emitted(server, source.id, user.key);
  assert.equal(event.axios.data.data.id, user.id);
});

test("the request is authenticated by the key the component sends, never as the source's owner", async () => {
  const owner = await server.createUser(unique("owner"));
  const other = await server.createUser(unique("other"));
  const withOthersKey = await caller(server, owner.key, other.key);
  const got = await call(withOthersKey.url, "do=me");
  assert.equal(got.axios.data.data.id, other.id);
  assert.equal(got.fetch.data.data.id, other.id);

  const withWrongKey = await caller(server, owner.key, "fnt_notakey000000000000000000000000");
  const refused = await call(withWrongKey.url, "do=me");
  assert.deepEqual(
    { ok: refused.axios.ok, status: refused.axios.status, code: refused.axios.code },
    { ok: false, status: 401, code: "unauthorized" },
  );
  assert.equal(refused.fetch.status, 401);
  assert.equal(refused.fetch.data.code, "unauthorized");
});

test("a source lists its own events and deploys another source through the API", async () => {
  const user = await server.createUser(unique("lister"));
  const source = await caller(server, user.key, user.key);
  await call(source.url, "do=me");
  const listed = await call(source.url, "do=own-events");
  assert.equal(listed.ok, true, JSON.stringify(listed));
  assert.equal(listed.data.data.length, 1);
  assert.equal(listed.data.data[0].event.fetch.data.data.id, user.id);

  const name = unique("deployed");
  const deployed = await call(source.url, `do=deploy&name=${name}`);
  assert.equal(deployed.ok, true, JSON.stringify(deployed));
  assert.equal(deployed.data.data.name, name);
  const mine = await server.api("GET", "/v1/users/me/sources?limit=100", { key: user.key });
  assert.ok(
    mine.body.data.some((s: { id: string }) => s.id === deployed.data.data.id),
    "the new source belongs to the key's user",
  );
});

test("the API's body limit and routes apply: a body over 1 MiB gets 413, paths outside /v1 get 404", async () => {
  const user = await server.createUser(unique("limits"));
  const source = await caller(server, user.key, user.key);
  const big = await call(source.url, `do=big&bytes=${1024 * 1024 + 10}`);
  assert.equal(big.status, 413, JSON.stringify(big));
  assert.equal(big.data.code, "payload_too_large");
  const outside = await call(source.url, "do=outside");
  assert.equal(outside.status, 404, JSON.stringify(outside));
  assert.equal(outside.data.code, "not_found");
  assert.match(outside.data.error, /only https:\/\/api\.pipedream\.com\/v1/);
});

test("with FOUNT_PIPEDREAM_API=false the request goes to the network, and fails as it did before", async () => {
  const off = await startServer({ pipedreamApi: false });
  try {
    const user = await off.createUser(unique("off"));
    const source = await caller(off, user.key, user.key);
    const got = await call(source.url, "do=me");
    // This host has no route to the internet: the name does not resolve. Where it does, Pipedream
    // itself answers, and never with this server's user.
    for (const result of [got.axios, got.fetch]) {
      assert.equal(result.ok, false, JSON.stringify(result));
      if (result.status === undefined) assert.match(result.code, /ENOTFOUND|EAI_AGAIN|EGRESS_REFUSED/);
    }
  } finally {
    await off.close();
  }
});

test("wrong keys sent by an account's components are throttled like an outside client's, for that account only", async () => {
  const throttled = await startServer({ authFailureLimit: 2 });
  try {
    const guesser = await throttled.createUser(unique("guesser"));
    const bystander = await throttled.createUser(unique("bystander"));
    const wrong = "fnt_wrongkey00000000000000000000000";
    const guessing = await caller(throttled, guesser.key, wrong);
    // Two wrong keys (axios, then fetch) use up the allowance…
    const first = await call(guessing.url, "do=me");
    assert.deepEqual([first.axios.status, first.fetch.status], [401, 401]);
    // …and the account's components are throttled from then on.
    const second = await call(guessing.url, "do=me");
    assert.deepEqual([second.axios.status, second.axios.code], [429, "auth_throttled"]);
    assert.equal(second.fetch.data.code, "auth_throttled");
    // Another account's components and outside clients are told 401 as before, not throttled.
    const other = await call((await caller(throttled, bystander.key, wrong)).url, "do=me");
    assert.deepEqual([other.axios.status, other.fetch.status], [401, 401]);
    const outside = await throttled.api("GET", "/v1/users/me", { key: wrong });
    assert.equal(outside.status, 401);
  } finally {
    await throttled.close();
  }
});

test("a component's requests count against its key's rate limit like any other", async () => {
  const limited = await startServer({ rateLimit: 4 });
  try {
    const user = await limited.createUser(unique("limited"));
    // The deploy is the key's first request, the first run's two calls the second and third.
    const source = await caller(limited, user.key, user.key);
    const first = await call(source.url, "do=me");
    assert.deepEqual([first.axios.ok, first.fetch.status], [true, 200]);
    const second = await call(source.url, "do=me");
    assert.equal(second.axios.ok, true);
    assert.deepEqual([second.fetch.status, second.fetch.data.code], [429, "rate_limited"]);
  } finally {
    await limited.close();
  }
});

test("got and the npm undici package reach it too", async () => {
  const user = await server.createUser(unique("clients"));
  const source = await deploy(
    server,
    { component_code: fixture("pipedream-api-clients.mjs"), configured_props: { apiKey: user.key } },
    user.key,
  );
  const got = await call(source.configured_props.http.endpoint_url);
  assert.equal(got.got.data?.id, user.id, JSON.stringify(got.got));
  assert.equal(got.undici.data?.id, user.id, JSON.stringify(got.undici));
});
