/**
 * The event search over HTTP (docs/streams.md, "Searching events"): text, JSON path, header, path,
 * channel, time range and delivery outcome find exactly the matching events of a source, page with
 * cursors, and reach across an account's sources (and an organization's, for members) without ever
 * showing another tenant's; export streams them as NDJSON that round-trips; a replay of a search sends
 * exactly what it finds, marked as a replay; bad parameters are 400s; a text search is served by the
 * store's text index, not a scan.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { DeliveryDispatcher } from "../../src/delivery/dispatcher.ts";
import { keptPageBytes } from "../../src/domain/events/retention.ts";
import { maxSearchesPerAccount, searchTurnWaitMs } from "../../src/http/search-turns.ts";
import {
  createWebhook,
  deliveries,
  deploySource,
  scriptedReceivers,
  subscribe,
} from "../delivery/receiver.ts";
import { startServer, type TestServer } from "../helpers.ts";
import { assertApiError } from "./openapi-walk.ts";

let server: TestServer;
let dispatcher: DeliveryDispatcher;
before(async () => {
  server = await startServer({ webhookAllowPrivate: true });
  dispatcher = server.built.services.dispatcher;
});
after(() => server.close());

const scripted = scriptedReceivers();

/** A source that emits the whole HTTP request (method, path, query, headers, body) on `?channel=`. */
const requestSourceCode = `export default {
  name: "Requests",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  async run(event) {
    this.$emit(event, { name: event.query.channel });
  },
};`;

/** Posts `body` to the source's endpoint under `path`, with extra headers. */
async function hit(
  endpoint: string,
  body: unknown,
  options: { path?: string; headers?: Record<string, string>; channel?: string } = {},
): Promise<void> {
  const query = options.channel === undefined ? "" : `?channel=${encodeURIComponent(options.channel)}`;
  const res = await fetch(`${endpoint}${options.path ?? ""}${query}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...options.headers },
    body: JSON.stringify(body),
  });
  assert.equal(res.status, 200, await res.text());
  await res.arrayBuffer().catch(() => undefined);
}

/** The bodies of a search's entries, newest first. */
async function search(path: string, query: string, key?: string): Promise<any> {
  const res = await server.api("GET", `${path}?expand=event&limit=100&${query}`, { key });
  assert.equal(res.status, 200, res.text);
  return res.body;
}
const bodies = (page: any) => page.data.map((e: any) => e.event.body);

/** A user with a source holding a known set of events. */
async function stocked() {
  const user = await server.createUser(`search-${process.pid}-${Math.random().toString(36).slice(2, 8)}`);
  const source = await deploySource(server, requestSourceCode, user.key);
  await hit(
    source.endpoint,
    { user: { id: 42 }, text: "Order shipped to Lisbon" },
    {
      path: "/hooks/a",
      headers: { "x-github-event": "push" },
    },
  );
  await hit(
    source.endpoint,
    { user: { id: "42" }, text: "refund for order" },
    {
      path: "/hooks/b",
      headers: { "x-github-event": "issues" },
    },
  );
  await hit(source.endpoint, { user: { id: 7 }, text: "nothing to see", flag: true }, { path: "/hooks/a" });
  await hit(source.endpoint, { user: { id: 42 }, text: "Lisbon again, other channel" }, { channel: "audit" });
  return { user, source };
}

test("text, JSON path, header, path and channel find exactly the matching events of a source", async () => {
  const { user, source } = await stocked();
  const list = `/v1/sources/${source.id}/event_summaries`;
  const text = (p: any) => bodies(p).map((b: any) => b.text);

  const page = await search(list, "q=lisbon", user.key);
  assert.deepEqual(text(page), ["Order shipped to Lisbon"], "case-insensitive, the default channel only");
  assert.equal(page.page_info.total_count, 1);
  assert.deepEqual(text(await search(list, "q=lisbon&event_name=audit", user.key)), [
    "Lisbon again, other channel",
  ]);
  assert.deepEqual(text(await search(list, "q=order", user.key)), [
    "refund for order",
    "Order shipped to Lisbon",
  ]);
  assert.deepEqual(
    text(await search(list, "q=order%20refund", user.key)),
    ["refund for order"],
    "every word",
  );
  assert.deepEqual(text(await search(list, `q=${encodeURIComponent('"for order"')}`, user.key)), [
    "refund for order",
  ]);
  assert.deepEqual(text(await search(list, "q=zzzzzz", user.key)), []);

  assert.deepEqual(
    text(await search(list, "where=body.user.id:42", user.key)),
    ["refund for order", "Order shipped to Lisbon"],
    "42 matches the number and the string",
  );
  assert.deepEqual(text(await search(list, "where=body.flag:true", user.key)), ["nothing to see"]);
  assert.deepEqual(text(await search(list, "where=headers.x-github-event:push", user.key)), [
    "Order shipped to Lisbon",
  ]);
  assert.deepEqual(text(await search(list, "where=path:/hooks/a", user.key)), [
    "nothing to see",
    "Order shipped to Lisbon",
  ]);
  assert.deepEqual(
    text(await search(list, "where=path:/hooks/a&where=body.user.id:42", user.key)),
    ["Order shipped to Lisbon"],
    "every where",
  );
  assert.deepEqual(text(await search(list, "where=body.user:42", user.key)), [], "an object is no value");
  assert.deepEqual(text(await search(list, "q=lisbon&where=body.user.id:7", user.key)), []);

  // /events answers the same.
  assert.deepEqual(text(await search(`/v1/sources/${source.id}/events`, "q=refund", user.key)), [
    "refund for order",
  ]);
});

test("a time range and paging by cursor work with a search", async () => {
  const { user, source } = await stocked();
  const list = `/v1/sources/${source.id}/event_summaries`;
  const all = (await search(list, "q=hooks", user.key)).data;
  assert.equal(all.length, 3);
  const [newest, middle, oldest] = all;
  const ms = (e: any) => Number(e.id.split("-")[0]);
  const ids = (p: any) => p.data.map((e: any) => e.id);
  assert.deepEqual(
    ids(await search(list, `q=hooks&since=${ms(middle)}`, user.key)).includes(middle.id),
    true,
  );
  assert.deepEqual(ids(await search(list, `q=hooks&until=${ms(oldest)}`, user.key)), []);
  const iso = new Date(ms(newest) + 1).toISOString();
  assert.deepEqual(
    ids(await search(list, `q=hooks&until=${encodeURIComponent(iso)}`, user.key)),
    ids({ data: all }),
  );
  assert.deepEqual(
    ids(await search(list, `since=${ms(newest) + 1}`, user.key)),
    [],
    "a time range alone searches too",
  );

  // Two at a time, back and forth.
  const first = (await server.api("GET", `${list}?q=hooks&limit=2`, { key: user.key })).body;
  assert.deepEqual(ids(first), [newest.id, middle.id]);
  assert.equal(first.page_info.total_count, 3);
  const second = (
    await server.api("GET", `${list}?q=hooks&limit=2&after=${first.page_info.end_cursor}`, { key: user.key })
  ).body;
  assert.deepEqual(ids(second), [oldest.id]);
  assert.equal(second.page_info.total_count, 3, "every match counts, on any page");
  assert.equal(second.page_info.end_cursor, null);
  const back = (await server.api("GET", `${list}?q=hooks&limit=2&before=${oldest.id}`, { key: user.key }))
    .body;
  assert.deepEqual(ids(back), [newest.id, middle.id]);
});

test("the cross-source routes search every source of the caller, or of an organization for its members, and never another tenant's", async () => {
  const a = await stocked();
  const second = await deploySource(server, requestSourceCode, a.user.key);
  await hit(second.endpoint, { text: "Lisbon from the second source" });
  const other = await stocked(); // another tenant, with the same words

  const mine = await search("/v1/users/me/event_summaries", "q=lisbon", a.user.key);
  assert.deepEqual(
    mine.data.map((e: any) => [e.metadata.emitter_id, e.event.body.text]),
    [
      [second.id, "Lisbon from the second source"],
      [a.source.id, "Order shipped to Lisbon"],
    ],
  );
  const theirs = await search("/v1/users/me/event_summaries", "q=lisbon", other.user.key);
  assert.deepEqual(
    theirs.data.map((e: any) => e.metadata.emitter_id),
    [other.source.id],
  );
  // Paging across sources.
  const one = (await server.api("GET", "/v1/users/me/event_summaries?q=lisbon&limit=1", { key: a.user.key }))
    .body;
  assert.equal(one.data[0].metadata.emitter_id, second.id);
  const next = (
    await server.api(
      "GET",
      `/v1/users/me/event_summaries?q=lisbon&limit=1&after=${encodeURIComponent(one.page_info.end_cursor)}`,
      {
        key: a.user.key,
      },
    )
  ).body;
  assert.deepEqual(
    next.data.map((e: any) => e.metadata.emitter_id),
    [a.source.id],
  );
  assert.equal(next.page_info.end_cursor, null);

  // An organization's sources, for members only.
  const org = (
    await server.api("POST", "/v1/admin/orgs", {
      body: { orgname: `search-org-${process.pid}`, owner_id: a.user.id },
    })
  ).body.data;
  const res = await server.api("POST", "/v1/sources", {
    key: a.user.key,
    body: { component_code: requestSourceCode, org_id: org.id },
  });
  assert.equal(res.status, 200, res.text);
  await hit(res.body.data.endpoint_url, { text: "Lisbon for the team" });
  const team = await search(`/v1/orgs/${org.id}/event_summaries`, "q=lisbon", a.user.key);
  assert.deepEqual(
    bodies(team).map((b: any) => b.text),
    ["Lisbon for the team"],
  );
  assertApiError(
    await server.api("GET", `/v1/orgs/${org.id}/event_summaries?q=lisbon`, { key: other.user.key }),
    {
      status: 404,
      code: "not_found",
    },
  );
  // The caller's own search does not take in its organization's sources.
  assert.ok(!bodies(await search("/v1/users/me/event_summaries", "q=team", a.user.key)).length);
});

test("delivery_status finds the events with a delivery in that state", async () => {
  const { user, source } = await stocked();
  const failing = await scripted(() => 500);
  const hook = await createWebhook(server, failing.url, user.key);
  await subscribe(server, { emitter_id: source.id, listener_id: hook.id }, user.key);
  await hit(source.endpoint, { text: "will fail" });
  await dispatcher.drain();
  const list = `/v1/sources/${source.id}/event_summaries`;
  const pending = bodies(await search(list, "delivery_status=pending", user.key)).map((b: any) => b.text);
  const failed = bodies(await search(list, "delivery_status=failed", user.key)).map((b: any) => b.text);
  assert.deepEqual(
    [...pending, ...failed],
    ["will fail"],
    "only the event after the subscription has a delivery",
  );
  assert.deepEqual(bodies(await search(list, "delivery_status=succeeded", user.key)), []);
});

test("export streams every matching event as NDJSON that round-trips to the event summaries", async () => {
  const { user, source } = await stocked();
  for (let n = 0; n < 7; n++) await hit(source.endpoint, { n, text: `bulk ${n}` });
  const res = await fetch(`${server.url}/v1/sources/${source.id}/events/export?q=bulk`, {
    headers: { authorization: `Bearer ${user.key}` },
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type") ?? "", /^application\/x-ndjson/);
  const text = await res.text();
  assert.ok(text.endsWith("\n"));
  const lines = text
    .trimEnd()
    .split("\n")
    .map((l) => JSON.parse(l));
  const listed = (await search(`/v1/sources/${source.id}/event_summaries`, "q=bulk", user.key)).data;
  assert.equal(lines.length, 7);
  assert.deepEqual(lines, listed);

  const everything = await fetch(`${server.url}/v1/sources/${source.id}/events/export`, {
    headers: { authorization: `Bearer ${user.key}` },
  });
  assert.equal((await everything.text()).trimEnd().split("\n").length, 10);
  const bad = await server.api("GET", `/v1/sources/${source.id}/events/export?where=nocolon`, {
    key: user.key,
  });
  assertApiError(bad, { status: 400, code: "invalid_parameter" });
  const other = await server.createUser(`search-export-${process.pid}`);
  assert.equal(
    (await server.api("GET", `/v1/sources/${source.id}/events/export`, { key: other.key })).status,
    404,
  );
});

test("an export of large events holds a page of at most 4 MiB of them, and exports each once, in order", async () => {
  const user = await server.createUser(`search-big-${process.pid}`);
  // 60 MB in all: an export nobody reads (below) stays open, well past what socket buffers take in.
  const made = await server.api("POST", "/v1/sources", {
    key: user.key,
    body: {
      component_code: `export default { name: "big", version: "1", async run(e) {
        for (let i = 0; i < e.n; i++) this.$emit({ i: e.from + i, pad: "x".repeat(e.size) });
      } }`,
      retention: { events: 300 },
    },
  });
  assert.equal(made.status, 200, made.text);
  const source = { id: made.body.data.id as string };
  for (let from = 0; from < 300; from += 100) {
    const run = await server.api("POST", `/v1/sources/${source.id}/run`, {
      key: user.key,
      body: { event: { n: 100, from, size: 200_000 } },
    });
    assert.equal(run.status, 200, run.text);
  }
  const { store } = server.built.services;
  // The bytes of event JSON of each page the export read from the store (what it holds at once).
  const pages: number[] = [];
  const searchEvents = store.searchEvents;
  store.searchEvents = async (search, page) => {
    const found = await searchEvents(search, page);
    if (search.emitterId === source.id)
      pages.push(found.items.reduce((n, e) => n + JSON.stringify(e.event).length, 0));
    return found;
  };
  try {
    const res = await fetch(`${server.url}/v1/sources/${source.id}/events/export`, {
      headers: { authorization: `Bearer ${user.key}` },
    });
    assert.equal(res.status, 200);
    const lines = (await res.text()).trimEnd().split("\n");
    assert.deepEqual(
      lines.map((l) => JSON.parse(l).event.i),
      Array.from({ length: 300 }, (_, k) => 299 - k),
    );
  } finally {
    store.searchEvents = searchEvents;
  }
  // 200 KB events: every page within the store's cut (20 of them), never 50 (10 MB) or 500 (100 MB).
  assert.ok(
    pages.every((bytes) => bytes <= keptPageBytes),
    JSON.stringify(pages),
  );

  // Exports nobody reads hold the account's search turns: its next search is a 429, another account's
  // is answered, and a cut export gives its turn back.
  const exports = Array.from({ length: maxSearchesPerAccount[store.driver] }, () => new AbortController());
  // Kept to the end: undici cancels the body of a response that is garbage-collected, which closed an
  // export (and gave its turn back) whenever a loaded machine collected before the 429 below.
  const unread: Response[] = [];
  for (const controller of exports) {
    const res = await fetch(`${server.url}/v1/sources/${source.id}/events/export`, {
      headers: { authorization: `Bearer ${user.key}` },
      signal: controller.signal,
    });
    assert.equal(res.status, 200);
    unread.push(res);
  }
  const mine = () => server.api("GET", "/v1/users/me/event_summaries?q=xxx", { key: user.key });
  // It waits for a turn, 10 s at most, then answers 429.
  const started = Date.now();
  assertApiError(await mine(), { status: 429, code: "rate_limited" });
  assert.ok(Date.now() - started >= searchTurnWaitMs - 50);
  const other = await server.createUser(`search-turns-${process.pid}`);
  assert.equal(
    (await server.api("GET", "/v1/users/me/event_summaries?q=xxx", { key: other.key })).status,
    200,
  );
  // One that waits gets the turn a cut export gives back.
  const waiting = mine();
  for (const controller of exports) controller.abort();
  assert.equal((await waiting).status, 200);
  assert.equal(unread.length, exports.length);
});

test("more than 20 where conditions is a 400 that says so", async () => {
  const { user, source } = await stocked();
  const wheres = Array.from({ length: 21 }, (_, i) => `where=body.n:${i}`).join("&");
  const res = await server.api("GET", `/v1/sources/${source.id}/event_summaries?${wheres}`, {
    key: user.key,
  });
  assertApiError(res, { status: 400, code: "invalid_parameter" });
  assert.match(res.body.error, /at most 20 where conditions \(got 21\)/);
  const twenty = Array.from({ length: 20 }, () => "where=body.text:x").join("&");
  const ok = await server.api("GET", `/v1/sources/${source.id}/event_summaries?${twenty}`, { key: user.key });
  assert.equal(ok.status, 200, ok.text);
});

test("a replay of a search counts, then sends exactly the matching events, marked as a replay", async () => {
  const { user, source } = await stocked();
  const r = await scripted(() => 200);
  const hook = await createWebhook(server, r.url, user.key);
  const replay = `/v1/sources/${source.id}/events/replay`;
  const dry = await server.api("POST", replay, {
    key: user.key,
    body: { listener_id: hook.id, where: ["body.user.id:42"], dry_run: true },
  });
  assert.equal(dry.status, 200, dry.text);
  assert.deepEqual(dry.body.data, { replayed: 0, matching: 2, replay_id: null });
  const sent = await server.api("POST", replay, {
    key: user.key,
    body: { listener_id: hook.id, q: "lisbon", where: "body.user.id:42" },
  });
  assert.equal(sent.status, 200, sent.text);
  assert.equal(sent.body.data.replayed, 1);
  await dispatcher.drain();
  const [d] = await deliveries(server, hook.id, user.key);
  assert.equal(d.replay.id, sent.body.data.replay_id);
  assert.equal(d.attempt_history[0].replay, true, "its attempt carries the replay marker");
  assert.equal(r.requests.length, 1);
  assert.equal(r.requests[0]!.json.body.text, "Order shipped to Lisbon");
});

test("a word shorter than a trigram is checked on the events the longer words found", async () => {
  const user = await server.createUser(`short-${process.pid}-${Math.random().toString(36).slice(2, 8)}`);
  const source = await deploySource(server, requestSourceCode, user.key);
  // `#` and `№` are in no ID, URL or header the events also hold, so each short word is in one event.
  for (const text of ["order #1 for Ana", "order #2 for Bo", "order №3 for Cy"])
    await hit(source.endpoint, { text });
  const list = `/v1/sources/${source.id}/event_summaries`;
  const text = async (q: string) =>
    bodies(await search(list, `q=${encodeURIComponent(q)}`, user.key)).map((b: any) => b.text);
  assert.deepEqual(await text("order #2"), ["order #2 for Bo"]);
  assert.deepEqual(await text("#1 order"), ["order #1 for Ana"], "whichever word comes first");
  assert.deepEqual(
    await text("order №"),
    ["order №3 for Cy"],
    "a word of other scripts, folded as the long ones",
  );
  assert.deepEqual(await text("order #4"), []);
});

test("bad q, where, times and cursors are 400s naming the field", async () => {
  const { user, source } = await stocked();
  const list = `/v1/sources/${source.id}/event_summaries`;
  const cases: Array<[string, string]> = [
    ["q=ab", "q"],
    ["q=ab%20cd", "q"],
    ["q=%20%20", "q"],
    [`q=${"abc%20".repeat(11)}`, "q"],
    ["where=nocolon", "where"],
    ["where=:value", "where"],
    ["where=body..id:1", "where"],
    [`where=${encodeURIComponent('body."x:1')}`, "where"],
    ["since=yesterday", "since"],
    ["until=1e%2B308", "until"],
    ["q=abc&event_name=%24in", "event_name"],
    ["delivery_status=lost", "delivery_status"],
  ];
  for (const [query, field] of cases) {
    const res = await server.api("GET", `${list}?${query}`, { key: user.key });
    assert.equal(res.status, 400, `${query}: ${res.text}`);
    assert.ok(JSON.stringify(res.body).includes(field), `${query} names ${field}: ${res.text}`);
  }
  const replay = await server.api("POST", `/v1/sources/${source.id}/events/replay`, {
    key: user.key,
    body: { listener_id: source.id, q: "x" },
  });
  assertApiError(replay, { status: 400, code: "invalid_parameter" });
  for (const cursor of ["nope", "1-0", "1-0:"]) {
    const res = await server.api("GET", `/v1/users/me/event_summaries?q=abc&after=${cursor}`, {
      key: user.key,
    });
    assertApiError(res, { status: 400, code: "invalid_cursor" });
  }
});

test("a text search, and a where of a short value, are served by the store's text index, not a scan of the events", async () => {
  const { source } = await stocked();
  for (const search of [{ text: ["lisbon"] }, { where: [{ path: ["body", "user", "id"], value: "42" }] }]) {
    const plan = await server.built.services.store.explainEventSearch(
      { emitterId: source.id, channel: "", ...search },
      { limit: 11 },
    );
    if (server.built.services.store.capabilities.listenNotify) {
      // On a few rows the planner rightly reads the source's key range; at scale the trigram index serves
      // a text search (the bench part history-search prints the plan over 1,000,000 events).
      assert.doesNotMatch(plan, /Seq Scan/, plan);
    } else {
      assert.match(plan, /SCAN search\.events_text_\d+ VIRTUAL TABLE INDEX/, plan);
      assert.doesNotMatch(plan, /SCAN e\b/, plan);
    }
  }
});

test("an event is found as soon as its emit is acknowledged, and an overwritten or deleted one no longer is, while the index lags", async () => {
  // On SQLite the index catches up after commit (here: not within the test by itself), and every search
  // brings it up to date first; on PostgreSQL a small window's events enter the GIN indexes a second after
  // commit (domain/events/search-indexer.ts), and the search reads them meanwhile through a partial index.
  const lagging = await startServer({ searchIndexDelayMs: 3_600_000 });
  try {
    const user = await lagging.createUser(`lag-${process.pid}-${Math.random().toString(36).slice(2, 8)}`);
    const source = await deploySource(lagging, requestSourceCode, user.key);
    const find = async (query: string) => {
      const res = await lagging.api(
        "GET",
        `/v1/sources/${source.id}/events?event_name=orders&limit=100&${query}`,
        {
          key: user.key,
        },
      );
      assert.equal(res.status, 200, res.text);
      return res.body.data.length as number;
    };
    await hit(source.endpoint, { text: "first parcel to Oporto" }, { channel: "orders" });
    assert.equal(await find("q=oporto"), 1);
    // The window keeps the newest 100: the 101st emit overwrites the first one's row.
    for (let n = 1; n <= 100; n++)
      await hit(source.endpoint, { text: `parcel ${n} to Faro` }, { channel: "orders" });
    assert.equal(await find("q=oporto"), 0);
    assert.equal(await find("q=faro"), 100);
    assert.equal(await find("q=parcel%20100%20"), 1);
    const del = await lagging.api("DELETE", `/v1/sources/${source.id}/events?event_name=orders`, {
      key: user.key,
    });
    assert.deepEqual(del.body, { data: { deleted: 100 } });
    assert.equal(await find("q=faro"), 0);
  } finally {
    await lagging.close();
  }
});
