/**
 * A replay of what a client written for Pipedream's REST API sends, changing nothing but the base URL:
 * `limit` and `after` on every request (also where they mean nothing), every list paged until
 * `end_cursor` is null, the events route with `expand=event`, `event_name` on event deletion, apps and
 * component search, organizations as workspaces, and Pipedream's SSE URL shapes.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Agent, fetch as undiciFetch } from "undici";
import { adminKey, startServer, type TestServer } from "../helpers.ts";

/** Emits the request body on `body.channel`, logs `body.log`, throws `body.fail`. */
const probeCode = `export default {
  key: "client-probe",
  name: "client probe",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  run(e) {
    const b = e.body ?? {};
    if (b.log) console.log(b.log);
    if (b.fail) throw new Error(b.fail);
    this.$emit(b, { summary: "probe", name: b.channel });
  },
};
`;

/** An app file's shape inside a component: the app prop reads two fields of $auth. */
const appComponentCode = `export default {
  key: "acme-new-widget",
  name: "New Widget",
  description: "Emits each new widget of an Acme account",
  version: "0.1.0",
  props: {
    acme: {
      type: "app",
      app: "acme",
      methods: {
        headers() { return { authorization: "Bearer " + this.$auth.api_key, "x-region": this.$auth["region"] }; },
      },
    },
    timer: { type: "$.interface.timer", default: { intervalSeconds: 3600 } },
  },
  async run() {},
};
`;

let server: TestServer;
let agent: Agent;
let user: { id: string; key: string };
let orgId: string;
const sourceIds: string[] = [];

before(async () => {
  server = await startServer({}, {}, { publishRegistry: true });
  agent = new Agent();
  user = await server.createUser("pd-client");
  const org = await server.api("POST", "/v1/admin/orgs", {
    body: { orgname: "pd-client-team", name: "Team", email: "team@example.com", owner_id: user.id },
  });
  assert.equal(org.status, 200, org.text);
  orgId = org.body.data.id;
  for (let i = 0; i < 5; i++) {
    const s = await server.api("POST", "/v1/sources", {
      key: user.key,
      body: { component_code: probeCode, name: `probe-${i}`, ...(i < 3 ? { org_id: orgId } : {}) },
    });
    assert.equal(s.status, 200, s.text);
    sourceIds.push(s.body.data.id);
  }
  for (let i = 0; i < 5; i++) {
    const w = await server.api("POST", "/v1/webhooks", {
      key: user.key,
      body: { url: `https://example.com/hook/${i}`, name: `hook-${i}` },
    });
    assert.equal(w.status, 200, w.text);
    const sub = await server.api(
      "POST",
      `/v1/subscriptions?emitter_id=${sourceIds[i]}&listener_id=${w.body.data.id}&limit=10&after=x`,
      { key: user.key, ...(i < 3 ? { body: { org_id: orgId } } : {}) },
    );
    assert.equal(sub.status, 200, `unknown query parameters on a POST are ignored too: ${sub.text}`);
  }
  const app = await server.api("POST", "/v1/components", {
    key: user.key,
    body: { component_code: appComponentCode },
  });
  assert.equal(app.status, 200, app.text);
});
after(async () => {
  await agent.destroy();
  await server.close();
});

/** Pages a list the way the clients do: `limit` and `after` until `end_cursor` is null. */
async function pageAll(path: string, limit = 2): Promise<{ items: any[]; pages: number; total: number }> {
  const items: any[] = [];
  let after: string | null = null;
  let pages = 0;
  let total = -1;
  const sep = path.includes("?") ? "&" : "?";
  do {
    const res = await server.api(
      "GET",
      `${path}${sep}limit=${limit}${after ? `&after=${encodeURIComponent(after)}` : ""}&client=pd-replay`,
      { key: user.key },
    );
    assert.equal(res.status, 200, `${path}: ${res.text}`);
    assert.ok(res.body.page_info, `${path} has page_info`);
    total = res.body.page_info.total_count;
    items.push(...res.body.data);
    after = res.body.page_info.end_cursor;
    pages++;
    assert.ok(pages < 50, `${path}: paging does not end`);
  } while (after !== null);
  return { items, pages, total };
}

test("every list pages to its end with limit and after, end_cursor null on the last page", async () => {
  // Events on one source, so the event lists have pages too.
  const endpoint = (await server.api("GET", `/v1/sources/${sourceIds[4]}`, { key: user.key })).body.data
    .endpoint_url;
  for (let i = 0; i < 5; i++) {
    const res = await fetch(endpoint, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ n: i }),
    });
    assert.equal(res.status, 200);
  }
  const lists: Array<[string, number]> = [
    ["/v1/users/me/sources", 2],
    ["/v1/users/me/webhooks", 5],
    ["/v1/users/me/subscriptions", 2],
    [`/v1/orgs/${orgId}/subscriptions`, 3],
    [`/v1/orgs/${orgId}/sources`, 3],
    [`/v1/workspaces/${orgId}/sources`, 3],
    [`/v1/users/me/sources?org_id=${orgId}`, 3],
    ["/v1/accounts", 0],
    ["/v1/users/me/workflows", 0],
    [`/v1/sources/${sourceIds[4]}/event_summaries`, 5],
    [`/v1/sources/${sourceIds[4]}/events`, 5],
    ["/v1/apps", 1],
    ["/v1/components/registry", 4],
  ];
  for (const [path, expected] of lists) {
    const { items, total } = await pageAll(path);
    assert.equal(items.length, total, `${path}: every item once`);
    assert.ok(total >= expected, `${path}: ${total} items, expected at least ${expected}`);
    const ids = items.map((x) => x.id);
    assert.equal(new Set(ids).size, ids.length, `${path}: no item twice`);
  }
  // A page exactly as long as what is left ends the list too.
  const exact = await server.api("GET", `/v1/sources/${sourceIds[4]}/events?limit=5`, { key: user.key });
  assert.equal(exact.body.data.length, 5);
  assert.equal(exact.body.page_info.end_cursor, null);
});

test("an invalid value of a known parameter is still a 400, an unknown parameter is ignored", async () => {
  for (const path of [
    "/v1/users/me/subscriptions?limit=0",
    `/v1/sources/${sourceIds[4]}/events?limit=abc`,
    `/v1/sources/${sourceIds[4]}/events?after=notanid`,
    `/v1/sources/${sourceIds[4]}/events?expand=everything`,
    "/v1/users/me/webhooks?after=!!!",
  ]) {
    const res = await server.api("GET", path, { key: user.key });
    assert.equal(res.status, 400, `${path}: ${res.text}`);
    assert.equal(typeof res.body.code, "string");
  }
  const me = await server.api("GET", "/v1/users/me?limit=10&after=abc&foo=bar", { key: user.key });
  assert.equal(me.status, 200, me.text);
});

test("include and exclude work on event_summaries and the events route", async () => {
  const path = `/v1/sources/${sourceIds[4]}/event_summaries`;
  const only = await server.api("GET", `${path}?include=id,metadata`, { key: user.key });
  assert.equal(only.status, 200, only.text);
  for (const e of only.body.data) assert.deepEqual(Object.keys(e).sort(), ["id", "metadata"]);
  const without = await server.api("GET", `/v1/sources/${sourceIds[4]}/events?exclude=event`, {
    key: user.key,
  });
  assert.equal(without.status, 200, without.text);
  for (const e of without.body.data) assert.equal("event" in e, false);
  // The events route answers the same entries as event_summaries.
  const a = await server.api("GET", `${path}?expand=event&limit=3`, { key: user.key });
  const b = await server.api("GET", `/v1/sources/${sourceIds[4]}/events?expand=event&limit=3`, {
    key: user.key,
  });
  assert.deepEqual(a.body, b.body);
});

test("DELETE /sources/{id}/events with event_name deletes that channel only", async () => {
  const s = await server.api("POST", "/v1/sources", { key: user.key, body: { component_code: probeCode } });
  const id = s.body.data.id;
  const run = (body: Record<string, unknown>) =>
    server.api("POST", `/v1/sources/${id}/run`, { key: user.key, body: { event: { body } } });
  await run({ log: "hello" });
  await run({ fail: "boom" });
  await run({ channel: "custom" });
  const count = async (channel: string) =>
    (
      await server.api("GET", `/v1/sources/${id}/events?event_name=${encodeURIComponent(channel)}`, {
        key: user.key,
      })
    ).body.page_info.total_count;
  assert.equal(await count("$logs"), 1);
  assert.ok((await count("$errors")) >= 1);
  assert.equal(await count("custom"), 1);
  assert.equal(await count("default"), 1);

  const del = await server.api("DELETE", `/v1/sources/${id}/events?event_name=$logs`, { key: user.key });
  assert.equal(del.status, 202, del.text);
  assert.equal(del.body.data.deleted, 1);
  assert.equal(await count("$logs"), 0);
  assert.ok((await count("$errors")) >= 1, "other channels are kept");
  assert.equal(await count("custom"), 1);
  const errors = await server.api("DELETE", `/v1/sources/${id}/events?event_name=$errors`, { key: user.key });
  assert.equal(errors.status, 202);
  assert.equal(await count("$errors"), 0);
  assert.equal(await count("default"), 1);
  const bad = await server.api("DELETE", `/v1/sources/${id}/events?event_name=$nope`, { key: user.key });
  assert.equal(bad.status, 400);
});

test("apps come from components' app props, with the $auth fields they read", async () => {
  const apps = await server.api("GET", "/v1/apps", { key: user.key });
  assert.equal(apps.status, 200, apps.text);
  const acme = apps.body.data.find((a: { name_slug: string }) => a.name_slug === "acme");
  assert.ok(acme, JSON.stringify(apps.body.data));
  assert.deepEqual(acme.auth_fields, ["api_key", "region"]);
  assert.equal(acme.auth_type, "keys");
  assert.deepEqual(acme.components, ["acme-new-widget"]);
  const one = await server.api("GET", "/v1/apps/acme", { key: user.key });
  assert.equal(one.status, 200);
  assert.deepEqual(one.body.data, acme);
  const missing = await server.api("GET", "/v1/apps/nope", { key: user.key });
  assert.equal(missing.status, 404);
  // Another user does not see apps known only from this user's components.
  const other = await server.createUser("pd-client-other");
  const theirs = await server.api("GET", "/v1/apps/acme", { key: other.key });
  assert.equal(theirs.status, 404);
});

test("component search covers the registry and the caller's own components", async () => {
  const search = (q: string, key = user.key) => server.api("GET", `/v1/components/search?${q}`, { key });
  const http = await search("query=requests");
  assert.equal(http.status, 200, http.text);
  assert.ok(http.body.sources.includes("http-new-requests"));
  const own = await search("query=widget&app=acme");
  assert.deepEqual(own.body.sources, ["acme-new-widget"]);
  assert.deepEqual(own.body.actions, []);
  const other = await server.createUser("pd-client-search");
  assert.deepEqual((await search("query=widget", other.key)).body.sources, []);
  const browse = await server.api("GET", "/v1/components/registry?q=cron", { key: user.key });
  assert.deepEqual(
    browse.body.data.map((c: { key: string }) => c.key),
    ["schedule-cron"],
  );
});

test("organizations answer as orgs and as workspaces; a foreign one is a 404", async () => {
  for (const prefix of ["orgs", "workspaces"]) {
    const res = await server.api("GET", `/v1/${prefix}/${orgId}`, { key: user.key });
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.body.data, {
      id: orgId,
      orgname: "pd-client-team",
      name: "Team",
      email: "team@example.com",
    });
  }
  const other = await server.createUser("pd-client-stranger");
  for (const path of [`/v1/orgs/${orgId}`, `/v1/workspaces/${orgId}`, `/v1/workspaces/${orgId}/sources`]) {
    const res = await server.api("GET", path, { key: other.key });
    assert.equal(res.status, 404, `${path}: ${res.text}`);
  }
});

/** Reads an SSE stream until `done` says so; returns the `data:` payloads seen. */
async function readStream(
  url: string,
  done: (data: any[]) => boolean,
  act: () => Promise<void>,
): Promise<any[]> {
  const controller = new AbortController();
  const res = await undiciFetch(url, {
    headers: { authorization: `Bearer ${adminKey}`, accept: "text/event-stream" },
    signal: controller.signal,
    dispatcher: agent,
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type") ?? "", /text\/event-stream/);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  const seen: any[] = [];
  let buffer = "";
  let acted = false;
  const timer = setTimeout(() => controller.abort(), 60_000);
  try {
    for (;;) {
      const { value, done: ended } = await reader.read();
      if (ended) break;
      buffer += decoder.decode(value, { stream: true });
      let cut = buffer.indexOf("\n\n");
      while (cut >= 0) {
        const frame = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        for (const line of frame.split("\n"))
          if (line.startsWith("data: ")) seen.push(JSON.parse(line.slice(6)));
        cut = buffer.indexOf("\n\n");
      }
      // The opening comment has arrived: the stream is subscribed, so act now.
      if (!acted) {
        acted = true;
        await act();
      }
      if (done(seen)) break;
    }
  } finally {
    clearTimeout(timer);
    controller.abort();
  }
  return seen;
}

test("Pipedream's SSE URL shapes: /sse/dc/{id}/emits and /sse/dc/{id}/observations", async () => {
  const s = await server.api("POST", "/v1/sources", { body: { component_code: probeCode } });
  const id = s.body.data.id;
  const run = (body: Record<string, unknown>) =>
    server.api("POST", `/v1/sources/${id}/run`, { body: { event: { body } } });
  const emits = await readStream(
    `${server.url}/sse/dc/${id}/emits`,
    (seen) => seen.length >= 1,
    async () => {
      await run({ log: "a line", n: 1 });
    },
  );
  assert.deepEqual(emits[0].event, { log: "a line", n: 1 });

  const observations = await readStream(
    `${server.url}/sse/dc/${id}/observations`,
    (seen) =>
      seen.some((e) => e.metadata.name === "$errors") && seen.some((e) => e.metadata.name === "$logs"),
    async () => {
      await run({ log: "second line", n: 2 });
      await run({ fail: "went wrong" });
    },
  );
  assert.ok(observations.every((e) => e.metadata.name === "$logs" || e.metadata.name === "$errors"));
  const unknown = await server.api("GET", "/sse/dc/dc_doesnotexist/emits");
  assert.equal(unknown.status, 404);
});
