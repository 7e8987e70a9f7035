/**
 * Sources over HTTP: create with component_id > component_code > component_url or key, read, update
 * (code, name, active, props), delete, the two lists with pagination, unique name slugs, the hook order
 * of the spec's state table, and that an inactive source is never invoked.
 */
import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import type { EventRecord } from "../../src/domain/types.ts";
import { deploy, emitted, eventsPruned, fixture, hit } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
let files: http.Server;
let filesUrl: string;

before(async () => {
  // component_url fixtures are served on loopback, which the server may reach only when allowed.
  server = await startServer({ webhookAllowPrivate: true });
  files = http.createServer((req, res) => {
    try {
      res.writeHead(200, { "content-type": "text/plain" }).end(fixture((req.url ?? "/").slice(1)));
    } catch {
      res.writeHead(404).end();
    }
  });
  await new Promise<void>((resolve) => files.listen(0, "127.0.0.1", resolve));
  filesUrl = `http://127.0.0.1:${(files.address() as AddressInfo).port}`;
});
after(async () => {
  await new Promise((resolve) => files.close(resolve));
  await server.close();
});

const lifecycle = fixture("lifecycle.mjs");
/** The same component after its author edited it. */
const lifecycleV2 = lifecycle.replace('const generation = "v1";', 'const generation = "v2";');

async function saveComponent(code: string, key?: string): Promise<string> {
  const res = await server.api("POST", "/v1/components", { body: { component_code: code }, key });
  assert.equal(res.status, 200, res.text);
  return res.body.data.id;
}

/** The hook/run log the component keeps in its db, read through a manual run's emit. */
async function steps(sourceId: string): Promise<string[]> {
  return (await emitted(server, sourceId)).map((e) => `${e.step}@${e.generation}`);
}

test("a created source has the spec's fields and runs deploy, then activate", async () => {
  const res = await server.api("POST", "/v1/sources", { body: { component_code: lifecycle } });
  assert.equal(res.status, 200, res.text);
  const s = res.body.data;
  assert.match(s.id, /^dc_[A-Za-z0-9]+$/);
  assert.match(s.user_id, /^u_/);
  assert.match(s.component_id, /^sc_/);
  assert.equal(s.active, true);
  assert.equal(s.name, "Lifecycle");
  assert.match(s.name_slug, /^lifecycle(-\d+)?$/);
  assert.equal(typeof s.created_at, "number");
  assert.equal(typeof s.updated_at, "number");
  assert.deepEqual(s.configured_props.timer, { cron: null, interval_seconds: 3600 });
  assert.deepEqual(await steps(s.id), ["deploy@v1", "activate@v1"]);
  assert.deepEqual((await emitted(server, s.id)).at(-1).log, ["deploy@v1:first", "activate@v1:first"]);
  for (const e of await emitted(server, s.id)) {
    assert.equal(e.endpoint, s.configured_props.http.endpoint_url, "hooks see this.http.endpoint");
  }

  const got = await server.api("GET", `/v1/sources/${s.id}`);
  assert.equal(got.status, 200);
  assert.deepEqual(got.body.data, s);
  const bySlug = await server.api("GET", `/v1/sources/${s.name_slug}`);
  assert.equal(bySlug.body.data.id, s.id);
});

test("an update with new code runs deactivate on the old code, then activate on the new; the id and db stay", async () => {
  const s = await deploy(server, { component_code: lifecycle });
  const res = await server.api("PUT", `/v1/sources/${s.id}`, { body: { component_code: lifecycleV2 } });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.data.id, s.id);
  assert.notEqual(res.body.data.component_id, s.component_id);
  assert.deepEqual(await steps(s.id), ["deploy@v1", "activate@v1", "deactivate@v1", "activate@v2"]);
  await server.api("POST", `/v1/sources/${s.id}/run`);
  assert.deepEqual((await emitted(server, s.id)).at(-1).log, [
    "deploy@v1:first",
    "activate@v1:first",
    "deactivate@v1:first",
    "activate@v2:first",
    "run@v2:first",
  ]);
});

test("an update of configured_props alone runs deactivate with the old props, then activate with the new", async () => {
  const s = await deploy(server, { component_code: lifecycle });
  const res = await server.api("PUT", `/v1/sources/${s.id}`, {
    body: { configured_props: { label: "second" } },
  });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.data.component_id, s.component_id);
  assert.deepEqual((await emitted(server, s.id)).at(-1).log, [
    "deploy@v1:first",
    "activate@v1:first",
    "deactivate@v1:first",
    "activate@v1:second",
  ]);
});

test("a delete runs deactivate, then the source, its endpoint and its events are gone", async () => {
  const s = await deploy(server, { component_code: lifecycle });
  const stored: EventRecord[] = [];
  const off = server.built.services.bus.on("event.stored", (e) => {
    if (e.emitterId === s.id) stored.push(e);
  });
  try {
    const res = await server.api("DELETE", `/v1/sources/${s.id}`);
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.body.data, { id: s.id });
  } finally {
    off();
  }
  assert.deepEqual(
    stored.filter((e) => e.channel === "").map((e) => (e.event as { step: string }).step),
    ["deactivate"],
  );
  assert.equal((await server.api("GET", `/v1/sources/${s.id}`)).status, 404);
  assert.equal((await server.api("DELETE", `/v1/sources/${s.id}`)).status, 404);
  assert.equal((await server.api("GET", `/v1/sources/${s.id}/event_summaries`)).status, 404);
  assert.equal((await hit(s.configured_props.http.endpoint_url, { method: "POST" })).status, 404);
  const { store } = server.built.services;
  assert.deepEqual(await store.listTimers(s.id), []);
  assert.deepEqual((await store.getSourceDb(s.id)).data, {});
  // The pruner deletes its events in the background, within a pass or two.
  await eventsPruned(server, s.id);
});

test("an inactive source is never invoked: endpoint 404, no timer, manual run 409, no hooks", async () => {
  const s = await deploy(server, { component_code: lifecycle });
  const endpoint = s.configured_props.http.endpoint_url;
  assert.equal((await hit(endpoint, { method: "POST" })).status, 200);
  assert.equal((await server.built.services.store.listTimers(s.id)).length, 1);

  const off = await server.api("PUT", `/v1/sources/${s.id}`, { body: { active: false } });
  assert.equal(off.status, 200, off.text);
  assert.equal(off.body.data.active, false);
  assert.equal(off.body.data.component_id, s.component_id);
  assert.equal((await hit(endpoint, { method: "POST" })).status, 404);
  assert.equal((await hit(`${endpoint}/sub/path?x=1`, { method: "GET" })).status, 404);
  const run = await server.api("POST", `/v1/sources/${s.id}/run`);
  assert.equal(run.status, 409);
  assert.equal(run.body.code, "conflict");
  assert.deepEqual(await server.built.services.store.listTimers(s.id), []);
  assert.deepEqual(await steps(s.id), ["deploy@v1", "activate@v1", "run@v1"], "nothing ran while inactive");

  const on = await server.api("PUT", `/v1/sources/${s.id}`, { body: { active: true } });
  assert.equal(on.body.data.active, true);
  assert.equal((await server.built.services.store.listTimers(s.id)).length, 1);
  assert.equal((await hit(endpoint, { method: "POST" })).status, 200);
  assert.equal((await server.api("POST", `/v1/sources/${s.id}/run`)).status, 200);
  assert.deepEqual((await steps(s.id)).slice(-2), ["run@v1", "run@v1"]);
});

test("create precedence: component_id, then component_code, then component_url; key finds a saved component", async () => {
  const counterId = await saveComponent(fixture("counter.js"));
  const greeterUrl = `${filesUrl}/greeter.ts`;

  const byId = await deploy(server, {
    component_id: counterId,
    component_code: lifecycle,
    component_url: greeterUrl,
    configured_props: { who: "id" },
  });
  assert.equal(byId.component_id, counterId);
  assert.equal(byId.name, "Counter");

  const byCode = await deploy(server, { component_code: lifecycle, component_url: greeterUrl });
  assert.equal(byCode.name, "Lifecycle");
  const saved = await server.api("GET", `/v1/components/${byCode.component_id}`);
  assert.equal(saved.body.data.code, lifecycle);
  assert.equal(saved.body.data.component_url, greeterUrl, "the URL is kept as metadata");

  const byUrl = await deploy(server, { component_url: greeterUrl, configured_props: { name: "url" } });
  assert.equal(byUrl.name, "Greeter");

  const byKey = await deploy(server, { key: "fount-test-counter" });
  assert.equal(byKey.component_id, counterId);

  const none = await server.api("POST", "/v1/sources", { body: { name: "nothing" } });
  assert.equal(none.status, 400);
  const unknown = await server.api("POST", "/v1/sources", { body: { component_id: "sc_nope" } });
  assert.equal(unknown.status, 404);
  const unknownKey = await server.api("POST", "/v1/sources", { body: { key: "no-such-key" } });
  assert.equal(unknownKey.status, 404);
});

test("a create that fails validation leaves no source behind", async () => {
  const user = await server.createUser("sources-failing");
  const bad = await server.api("POST", "/v1/sources", {
    key: user.key,
    body: { component_code: fixture("greeter.ts"), configured_props: { times: 9, name: "x" } },
  });
  assert.equal(bad.status, 422);
  const throwing = await server.api("POST", "/v1/sources", {
    key: user.key,
    body: {
      component_code: `export default { name: "Bad deploy", version: "1", hooks: { deploy() { throw new Error("no webhook for you"); } }, run() {} };`,
    },
  });
  assert.equal(throwing.status, 422, throwing.text);
  assert.equal(throwing.body.code, "hook_failed");
  assert.match(throwing.body.error, /no webhook for you/);
  const list = await server.api("GET", "/v1/users/me/sources", { key: user.key });
  assert.equal(list.body.page_info.total_count, 0);
});

test("PUT changes the name (with a unique slug), the code, the props and active, and answers the Source", async () => {
  const user = await server.createUser("sources-put");
  const s = await deploy(server, { component_code: fixture("counter.js"), name: "Daily Digest" }, user.key);
  assert.equal(s.name_slug, "daily-digest");
  await deploy(server, { component_code: fixture("counter.js"), name: "Weekly" }, user.key);

  const renamed = await server.api("PUT", `/v1/sources/${s.id}`, { key: user.key, body: { name: "Weekly" } });
  assert.equal(renamed.status, 200, renamed.text);
  assert.equal(renamed.body.data.name, "Weekly");
  assert.equal(renamed.body.data.name_slug, "weekly-1");
  assert.equal(renamed.body.data.component_id, s.component_id);

  const same = await server.api("PUT", `/v1/sources/${s.id}`, { key: user.key, body: { name: "Weekly" } });
  assert.equal(same.body.data.name_slug, "weekly-1", "renaming to its own name keeps its slug");

  const recoded = await server.api("PUT", `/v1/sources/${s.id}`, {
    key: user.key,
    body: { component_code: fixture("greeter.ts"), configured_props: { name: "put" } },
  });
  assert.equal(recoded.status, 200, recoded.text);
  assert.equal(recoded.body.data.id, s.id);
  assert.deepEqual(recoded.body.data.configured_props, { name: "put", times: 1 });
  await server.api("POST", `/v1/sources/${s.id}/run`, { key: user.key });
  assert.deepEqual((await emitted(server, s.id, user.key)).at(-1), { text: "hi put", length: 6 });

  const invalid = await server.api("PUT", `/v1/sources/${s.id}`, {
    key: user.key,
    body: { configured_props: { name: "x", times: 0 } },
  });
  assert.equal(invalid.status, 422);
  const unchanged = await server.api("GET", `/v1/sources/${s.id}`, { key: user.key });
  assert.deepEqual(unchanged.body.data.configured_props, { name: "put", times: 1 });

  const stranger = await server.createUser("sources-put-stranger");
  const foreign = await server.api("PUT", `/v1/sources/${s.id}`, {
    key: stranger.key,
    body: { active: false },
  });
  assert.equal(foreign.status, 404);
});

test("name slugs are unique per owner: name, name-1, name-2; another owner starts again", async () => {
  const a = await server.createUser("slugs-a");
  const b = await server.createUser("slugs-b");
  const slugs: string[] = [];
  for (let i = 0; i < 3; i++)
    slugs.push((await deploy(server, { component_code: fixture("counter.js") }, a.key)).name_slug);
  assert.deepEqual(slugs, ["counter", "counter-1", "counter-2"]);
  assert.equal((await deploy(server, { component_code: fixture("counter.js") }, b.key)).name_slug, "counter");
  const named = await deploy(
    server,
    { component_code: fixture("counter.js"), name: "  Ünïcode & Spaces!  " },
    a.key,
  );
  assert.equal(named.name, "  Ünïcode & Spaces!  ");
  assert.equal(named.name_slug, "unicode-spaces");
  // A deleted source frees its slug.
  const first = (await server.api("GET", "/v1/sources/counter", { key: a.key })).body.data;
  await server.api("DELETE", `/v1/sources/${first.id}`, { key: a.key });
  assert.equal((await deploy(server, { component_code: fixture("counter.js") }, a.key)).name_slug, "counter");
});

test("concurrent deploys of one name get distinct slugs", async () => {
  const user = await server.createUser("slugs-race");
  const res = await Promise.all(
    Array.from({ length: 6 }, () =>
      server.api("POST", "/v1/sources", { key: user.key, body: { component_code: fixture("counter.js") } }),
    ),
  );
  for (const r of res) assert.equal(r.status, 200, r.text);
  assert.deepEqual(res.map((r) => r.body.data.name_slug).sort(), [
    "counter",
    "counter-1",
    "counter-2",
    "counter-3",
    "counter-4",
    "counter-5",
  ]);
});

test("GET /v1/users/me/sources pages newest first with cursors; each user sees only their own", async () => {
  const user = await server.createUser("sources-list");
  const ids: string[] = [];
  for (let i = 0; i < 5; i++)
    ids.push((await deploy(server, { component_code: fixture("counter.js") }, user.key)).id);
  const first = await server.api("GET", "/v1/users/me/sources?limit=2", { key: user.key });
  assert.equal(first.status, 200);
  assert.deepEqual(
    first.body.data.map((s: { id: string }) => s.id),
    [ids[4], ids[3]],
  );
  assert.equal(first.body.page_info.total_count, 5);
  assert.equal(first.body.page_info.count, 2);
  const second = await server.api(
    "GET",
    `/v1/users/me/sources?limit=2&after=${first.body.page_info.end_cursor}`,
    {
      key: user.key,
    },
  );
  assert.deepEqual(
    second.body.data.map((s: { id: string }) => s.id),
    [ids[2], ids[1]],
  );
  const third = await server.api(
    "GET",
    `/v1/users/me/sources?limit=2&after=${second.body.page_info.end_cursor}`,
    {
      key: user.key,
    },
  );
  assert.deepEqual(
    third.body.data.map((s: { id: string }) => s.id),
    [ids[0]],
  );
  const back = await server.api(
    "GET",
    `/v1/users/me/sources?limit=2&before=${second.body.page_info.start_cursor}`,
    {
      key: user.key,
    },
  );
  assert.deepEqual(
    back.body.data.map((s: { id: string }) => s.id),
    [ids[4], ids[3]],
  );
  const item = first.body.data[0];
  assert.equal(item.component_id !== undefined && item.configured_props !== undefined, true);
  assert.equal((await server.api("GET", "/v1/users/me/sources?limit=0", { key: user.key })).status, 400);
  assert.equal((await server.api("GET", "/v1/users/me/sources?limit=101", { key: user.key })).status, 400);
  const other = await server.createUser("sources-list-other");
  assert.equal(
    (await server.api("GET", "/v1/users/me/sources", { key: other.key })).body.page_info.total_count,
    0,
  );
});

test("sources created for an organization are listed at /v1/orgs/{org_id}/sources for its members", async () => {
  const owner = await server.createUser("org-owner");
  const member = await server.createUser("org-member");
  const outsider = await server.createUser("org-outsider");
  const org = await server.api("POST", "/v1/admin/orgs", {
    body: { orgname: "acme-sources", owner_id: owner.id },
  });
  assert.equal(org.status, 200, org.text);
  const orgId = org.body.data.id as string;
  assert.equal(
    (await server.api("POST", `/v1/admin/orgs/${orgId}/members`, { body: { user_id: member.id } })).status,
    200,
  );

  const ids: string[] = [];
  for (let i = 0; i < 3; i++) {
    ids.push((await deploy(server, { component_code: fixture("counter.js"), org_id: orgId }, owner.key)).id);
  }
  await deploy(server, { component_code: fixture("counter.js") }, owner.key); // personal, not the org's

  const page = await server.api("GET", `/v1/orgs/${orgId}/sources?limit=2`, { key: member.key });
  assert.equal(page.status, 200, page.text);
  assert.equal(page.body.page_info.total_count, 3);
  assert.deepEqual(
    page.body.data.map((s: { id: string }) => s.id),
    [ids[2], ids[1]],
  );
  const rest = await server.api(
    "GET",
    `/v1/orgs/${orgId}/sources?limit=2&after=${page.body.page_info.end_cursor}`,
    {
      key: member.key,
    },
  );
  assert.deepEqual(
    rest.body.data.map((s: { id: string }) => s.id),
    [ids[0]],
  );
  // A member may use the org's source; an outsider gets 404 everywhere.
  assert.equal((await server.api("POST", `/v1/sources/${ids[0]}/run`, { key: member.key })).status, 200);
  assert.equal((await server.api("GET", `/v1/orgs/${orgId}/sources`, { key: outsider.key })).status, 404);
  assert.equal((await server.api("GET", `/v1/sources/${ids[0]}`, { key: outsider.key })).status, 404);
  // The org's slugs are its own: the owner's personal "counter" does not push the org's to counter-1.
  const orgSlugs = page.body.data.concat(rest.body.data).map((s: { name_slug: string }) => s.name_slug);
  assert.deepEqual(orgSlugs.sort(), ["counter", "counter-1", "counter-2"]);
});
