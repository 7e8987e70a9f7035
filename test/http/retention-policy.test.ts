/**
 * Retention the owner chooses (issue 28): a source's `retention: {events?, days?}` is set by
 * POST/PUT /v1/sources and shown on every rendering of it; its channels list, page, resume (SSE) and
 * backfill through everything it keeps, and the pruner deletes the rest in the background, within its
 * rate (`FOUNT_RETENTION_PRUNE_RATE`); a policy over the instance's maximum is a 400; `$logs` and
 * `$errors` follow the instance's own settings.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { deploy, FakeClock, startClockServer } from "../fixtures/components/fixtures.ts";
import { adminKey, startServer, type TestServer } from "../helpers.ts";
import { assertApiError } from "./openapi-walk.ts";

const burst = `export default { name: "burst", version: "1", async run(e) {
  for (let i = 0; i < (e.n ?? 0); i++) this.$emit({ i: (e.from ?? 0) + i });
  for (let i = 0; i < (e.logs ?? 0); i++) console.log("line " + i);
} }`;

// The pruner visits touched windows every 20 ms here (1 s by default), and $logs keeps 5.
const env = {
  FOUNT_RETENTION_PRUNE_MS: "20",
  FOUNT_RETENTION_LOGS_EVENTS: "5",
  FOUNT_WEBHOOK_ALLOW_PRIVATE: "true",
};

let server: TestServer;
before(async () => {
  server = await startServer({}, env);
});
after(() => server.close());

async function run(s: TestServer, sourceId: string, event: unknown): Promise<void> {
  const res = await s.api("POST", `/v1/sources/${sourceId}/run`, { body: { event } });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.data.ok, true, JSON.stringify(res.body.data.error));
}

/** Every event of a channel through event_summaries, newest first, `limit` at a time. */
async function everyEvent(s: TestServer, sourceId: string, limit = 100): Promise<any[]> {
  const all: any[] = [];
  let cursor = "";
  for (;;) {
    const res = await s.api(
      "GET",
      `/v1/sources/${sourceId}/event_summaries?expand=event&limit=${limit}${cursor ? `&after=${cursor}` : ""}`,
    );
    assert.equal(res.status, 200, res.text);
    all.push(...res.body.data);
    if (!res.body.page_info.end_cursor) return all;
    cursor = res.body.page_info.end_cursor;
  }
}

/** Waits until the store holds `n` events of a channel (the pruner runs in the background). */
async function storedBecomes(s: TestServer, sourceId: string, channel: string, n: number): Promise<void> {
  const store = s.built.services.store;
  for (let tries = 0; tries < 600; tries++) {
    if ((await store.countEvents(sourceId, channel)) === n) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(await store.countEvents(sourceId, channel), n, "the pruner brought the channel down");
}

test("a source with {events: 1000} keeps 1,000 per channel, pages through them, and the rest is pruned", async () => {
  const s = await deploy(server, { component_code: burst, retention: { events: 1000 } } as never);
  assert.deepEqual(s.retention, { events: 1000 });
  for (let from = 0; from < 1200; from += 400) await run(server, s.id, { n: 400, from });
  const first = await server.api("GET", `/v1/sources/${s.id}/event_summaries?limit=100`);
  assert.equal(first.body.page_info.total_count, 1000);
  const kept = await everyEvent(server, s.id);
  assert.deepEqual(
    kept.map((e) => e.event.i),
    Array.from({ length: 1000 }, (_, k) => 1199 - k),
  );
  const events = await server.api("GET", `/v1/sources/${s.id}/events?limit=100`);
  assert.equal(events.body.page_info.total_count, 1000);
  await storedBecomes(server, s.id, "", 1000);
  assert.equal((await everyEvent(server, s.id)).length, 1000);
});

test("without a policy a channel keeps 100, as the specification says, and $logs its own setting", async () => {
  const s = await deploy(server, { component_code: burst });
  assert.equal(s.retention, null);
  await run(server, s.id, { n: 150, logs: 8 });
  const page = await server.api("GET", `/v1/sources/${s.id}/event_summaries?limit=100`);
  assert.equal(page.body.page_info.total_count, 100);
  assert.equal(page.body.data[0].event.i, 149);
  const logs = await server.api("GET", `/v1/sources/${s.id}/event_summaries?event_name=$logs&limit=100`);
  assert.equal(logs.body.page_info.total_count, 5);
  await storedBecomes(server, s.id, "", 100);
  await storedBecomes(server, s.id, "$logs", 5);
});

test("retention is shown on every rendering, changed by PUT, and null is the instance's default again", async () => {
  const s = await deploy(server, { component_code: burst, retention: { events: 500, days: 30 } } as never);
  assert.deepEqual(s.retention, { events: 500, days: 30 });
  const got = await server.api("GET", `/v1/sources/${s.id}`);
  assert.deepEqual(got.body.data.retention, { events: 500, days: 30 });
  const listed = await server.api("GET", "/v1/users/me/sources?limit=100");
  assert.deepEqual(listed.body.data.find((x: any) => x.id === s.id).retention, { events: 500, days: 30 });

  await run(server, s.id, { n: 20 });
  const smaller = await server.api("PUT", `/v1/sources/${s.id}`, { body: { retention: { events: 5 } } });
  assert.equal(smaller.status, 200, smaller.text);
  assert.deepEqual(smaller.body.data.retention, { events: 5 });
  const page = await server.api("GET", `/v1/sources/${s.id}/event_summaries?limit=100`);
  assert.equal(page.body.page_info.total_count, 5, "a smaller window shows at once");
  await storedBecomes(server, s.id, "", 5);

  const reset = await server.api("PUT", `/v1/sources/${s.id}`, { body: { retention: null } });
  assert.equal(reset.body.data.retention, null);
  const unchanged = await server.api("PUT", `/v1/sources/${s.id}`, { body: { name: "renamed" } });
  assert.equal(unchanged.body.data.retention, null);
});

test("a policy over the instance's maximum, or malformed, is a 400 and nothing changes", async () => {
  const s = await deploy(server, { component_code: burst });
  for (const [retention, field] of [
    [{ events: 1_000_001 }, "retention.events"],
    [{ days: 3651 }, "retention.days"],
  ] as const) {
    const created = await server.api("POST", "/v1/sources", { body: { component_code: burst, retention } });
    assertApiError(created, { status: 400, code: "invalid_parameter" });
    assert.equal(created.body.details.field, field);
    const updated = await server.api("PUT", `/v1/sources/${s.id}`, { body: { retention } });
    assertApiError(updated, { status: 400, code: "invalid_parameter" });
  }
  for (const retention of [
    { events: 0 },
    { days: -1 },
    { events: "many" },
    { events: 1.5 },
    { weeks: 2 },
    7,
  ]) {
    const res = await server.api("PUT", `/v1/sources/${s.id}`, { body: { retention } });
    assertApiError(res, { range: "4xx" }, JSON.stringify(retention));
    assert.equal(res.status, 400);
  }
  assert.equal((await server.api("GET", `/v1/sources/${s.id}`)).body.data.retention, null);
  // The maximum itself is allowed.
  const max = await server.api("PUT", `/v1/sources/${s.id}`, {
    body: { retention: { events: 1_000_000, days: 3650 } },
  });
  assert.equal(max.status, 200, max.text);
});

test("backfill to a new subscription queues everything the window keeps, oldest first, a page at a time", async () => {
  const s = await deploy(server, { component_code: burst, retention: { events: 5000 } } as never);
  for (let from = 0; from < 2500; from += 500) await run(server, s.id, { n: 500, from });
  const hook = await server.api("POST", "/v1/webhooks", { body: { url: "http://127.0.0.1:9/hook" } });
  assert.equal(hook.status, 200, hook.text);
  const sub = await server.api("POST", "/v1/subscriptions", {
    body: { emitter_id: s.id, listener_id: hook.body.data.id, backfill: true },
  });
  assert.equal(sub.status, 200, sub.text);
  const deliveries = await server.api("GET", `/v1/webhooks/${hook.body.data.id}/deliveries?limit=100`);
  assert.equal(deliveries.body.page_info.total_count, 2500);
  // Newest first: the last ones queued are the newest events, across the pages of the backfill.
  const events = (await everyEvent(server, s.id)).slice(0, 100);
  assert.deepEqual(
    deliveries.body.data.map((d: any) => d.event_id),
    events.map((e) => e.id),
  );
});

test("SSE resume (Last-Event-ID) replays every kept event after it, reading the store as it sends", async () => {
  const s = await deploy(server, { component_code: burst, retention: { events: 5000 } } as never);
  for (let from = 0; from < 2500; from += 500) await run(server, s.id, { n: 500, from });
  const oldest = (await everyEvent(server, s.id)).at(-1);
  const controller = new AbortController();
  // The answer's headers come after the first page of the source's events, not after the whole window:
  // a later page waits for them (3 s at most, so that a server reading everything first is not stuck).
  const store = server.built.services.store;
  const list = store.listEvents;
  let pages = 0;
  let headersIn!: () => void;
  const began = new Promise<void>((resolve) => {
    headersIn = resolve;
  });
  store.listEvents = async (id, query) => {
    if (id === s.id && ++pages > 1) await Promise.race([began, new Promise((r) => setTimeout(r, 3000))]);
    return list.call(store, id, query);
  };
  let res: Response;
  try {
    res = await fetch(`${server.url}/sources/${s.id}/sse`, {
      headers: {
        authorization: `Bearer ${server.built.services.config.bootstrapApiKey}`,
        "last-event-id": oldest.id,
      },
      signal: controller.signal,
    });
    assert.ok(pages <= 2, `pages read before the stream began: ${pages}`);
  } finally {
    headersIn();
    store.listEvents = list;
  }
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = "";
  const timer = setTimeout(() => controller.abort(), 20_000);
  try {
    while ((text.match(/^id: /gm) ?? []).length < 2499) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
    }
  } finally {
    clearTimeout(timer);
    controller.abort();
  }
  const ids = [...text.matchAll(/^data: (.*)$/gm)].map((m) => JSON.parse(m[1]!).event.i);
  assert.deepEqual(
    ids,
    Array.from({ length: 2499 }, (_, k) => k + 1),
  );
});

test("age pruning removes exactly the events older than the source's days", async () => {
  const clock = new FakeClock("2026-03-01T00:00:00Z");
  const aged = await startClockServer(clock, { env: { ...env, FOUNT_RETENTION_SWEEP_MS: "20" } });
  try {
    const s = await deploy(aged, { component_code: burst, retention: { days: 1 } } as never);
    await run(aged, s.id, { n: 2, from: 0 });
    clock.advance(12 * 3600);
    await run(aged, s.id, { n: 2, from: 2 });
    clock.advance(12 * 3600);
    // Exactly one day after the first two: still kept (older than the limit goes, not as old).
    assert.equal((await everyEvent(aged, s.id)).length, 4);
    clock.advance(1);
    assert.deepEqual(
      (await everyEvent(aged, s.id)).map((e) => e.event.i),
      [3, 2],
    );
    await storedBecomes(aged, s.id, "", 2);
  } finally {
    await aged.close();
  }
});

/**
 * Runs `body` against a server of its own whose pruner deletes 100 events a batch at 1,000 a second: at
 * least 100 ms between two batches of a channel.
 */
async function withPacedServer(body: (paced: TestServer) => Promise<void>): Promise<void> {
  const paced = await startServer(
    {},
    { ...env, FOUNT_RETENTION_PRUNE_BATCH: "100", FOUNT_RETENTION_PRUNE_RATE: "1000" },
  );
  try {
    await body(paced);
  } finally {
    await paced.close();
  }
}

test("the pruner keeps within FOUNT_RETENTION_PRUNE_RATE: a pause after each batch, as long as the rate asks", async () => {
  await withPacedServer(async (paced) => {
    // Over 100 (a window of up to 100 is kept exact as events are stored), so the pruner trims it.
    const s = await deploy(paced, { component_code: burst, retention: { events: 101 } } as never);
    // Timed from before the run: on a loaded machine the run's answer came after several batches had
    // been pruned, and a clock started then saw too few pauses (357 ms once).
    const started = performance.now();
    await run(paced, s.id, { n: 1000, from: 0 });
    await storedBecomes(paced, s.id, "", 101);
    const tookMs = performance.now() - started;
    // 899 past the window, 9 batches: 8 pauses of 100 ms, all after the clock started. Unpaced, the 9
    // batches take a few milliseconds.
    assert.ok(tookMs >= 400, `pruned 899 events in ${tookMs.toFixed(0)} ms`);
    assert.deepEqual(
      (await everyEvent(paced, s.id)).map((e) => e.event.i),
      Array.from({ length: 101 }, (_, k) => 999 - k),
    );
  });
});

test("events past the window that the pruner has not reached are neither exported, replayed nor shown", async () => {
  // A pruner that does not come back within the test: what the window dropped stays in the store.
  const idle = await startServer(
    {},
    { ...env, FOUNT_RETENTION_PRUNE_MS: "3600000", FOUNT_RETENTION_SWEEP_MS: "3600000" },
  );
  try {
    const s = await deploy(idle, { component_code: burst, retention: { events: 200 } } as never);
    await run(idle, s.id, { n: 200, from: 0 });
    const put = await idle.api("PUT", `/v1/sources/${s.id}`, { body: { retention: { events: 150 } } });
    assert.equal(put.status, 200, put.text);
    assert.equal(await idle.built.services.store.countEvents(s.id, ""), 200, "nothing pruned yet");
    const kept = await everyEvent(idle, s.id);
    assert.equal(kept.length, 150);
    const exported = await fetch(`${idle.url}/v1/sources/${s.id}/events/export`, {
      headers: { authorization: `Bearer ${adminKey}` },
    });
    const lines = (await exported.text()).trimEnd().split("\n");
    assert.deepEqual(
      lines.map((l) => JSON.parse(l).event.i),
      kept.map((e) => e.event.i),
    );
    const hook = await idle.api("POST", "/v1/webhooks", { body: { url: "https://example.com/h" } });
    const listener_id = hook.body.data.id;
    const dry = await idle.api("POST", `/v1/sources/${s.id}/events/replay`, {
      body: { listener_id, dry_run: true },
    });
    assert.equal(dry.body.data.matching, 150, dry.text);
    // The oldest kept event, and the one just past the window.
    const oldestKept = kept.at(-1).id;
    const stored = await idle.built.services.store.listEvents(s.id, { channel: "", limit: 200 });
    const dropped = stored.items[150]!.id;
    const one = (eventId: string) =>
      idle.api("POST", `/v1/sources/${s.id}/events/${eventId}/replay`, { body: { listener_id } });
    assert.equal((await idle.api("GET", `/v1/sources/${s.id}/events/${oldestKept}`)).status, 200);
    assert.equal((await one(oldestKept)).status, 200);
    assertApiError(await idle.api("GET", `/v1/sources/${s.id}/events/${dropped}`), {
      status: 404,
      code: "not_found",
    });
    assertApiError(await one(dropped), { status: 404, code: "not_found" });
  } finally {
    await idle.close();
  }
});

test("a deleted source's events are deleted by the pruner in paced batches, not by its DELETE", async () => {
  await withPacedServer(async (paced) => {
    const s = await deploy(paced, { component_code: burst, retention: { events: 5000 } } as never);
    await run(paced, s.id, { n: 1000, from: 0, logs: 3 });
    const store = paced.built.services.store;
    assert.equal(await store.countEvents(s.id, ""), 1000);
    const res = await paced.api("DELETE", `/v1/sources/${s.id}`);
    assert.equal(res.status, 200, res.text);
    // Gone for every reader at once...
    assert.equal((await paced.api("GET", `/v1/sources/${s.id}/event_summaries`)).status, 404);
    // ...while the rows go 100 at a time, 100 ms apart (one statement for a window of 1,000,000 held
    // SQLite's writer, and every other source's ingest, for 1.5 s).
    assert.ok((await store.countEvents(s.id, "")) > 0, "the DELETE left the rows to the pruner");
    await storedBecomes(paced, s.id, "", 0);
    await storedBecomes(paced, s.id, "$logs", 0);
  });
});

test("DELETE /v1/sources/{id}/events deletes exactly its inclusive range, in the pruner's paced batches", async () => {
  await withPacedServer(async (paced) => {
    const s = await deploy(paced, { component_code: burst, retention: { events: 5000 } } as never);
    await run(paced, s.id, { n: 1000, from: 0 });
    const oldestFirst = (await everyEvent(paced, s.id)).reverse();
    assert.equal(oldestFirst.length, 1000);
    const started = performance.now();
    const del = await paced.api(
      "DELETE",
      `/v1/sources/${s.id}/events?start_id=${oldestFirst[100].id}&end_id=${oldestFirst[899].id}`,
    );
    const tookMs = performance.now() - started;
    assert.equal(del.status, 202, del.text);
    assert.deepEqual(del.body, { data: { deleted: 800 } });
    // Deleted before the answer: the oldest and newest hundred are left, nothing between.
    assert.deepEqual(
      (await everyEvent(paced, s.id)).map((e) => e.event.i),
      [...Array.from({ length: 100 }, (_, k) => 999 - k), ...Array.from({ length: 100 }, (_, k) => 99 - k)],
    );
    // 8 batches of 100 at 1,000 a second: 7 pauses of 100 ms before the answer.
    assert.ok(tookMs >= 500, `deleted 800 events in ${tookMs.toFixed(0)} ms`);
  });
});

test("a free account's policy is held to FOUNT_FREE_RETENTION_MAX_*, and gets the free maximum age when it names none", async () => {
  // Unset, the free maximum is the instance's, and the refusal says only that.
  const plain = await server.createUser("retention_free_plain", "free");
  const refused = await server.api("POST", "/v1/sources", {
    key: plain.key,
    body: { component_code: burst, retention: { events: 1_000_001 } },
  });
  assertApiError(refused, { status: 400, code: "invalid_parameter" });
  assert.equal(refused.body.error, "retention.events may be at most 1000000 on this instance");
  const limited = await startServer(
    {},
    { FOUNT_FREE_RETENTION_MAX_EVENTS: "500", FOUNT_FREE_RETENTION_MAX_DAYS: "30" },
  );
  try {
    const free = await limited.createUser("retention_free", "free");
    const paid = await limited.createUser("retention_paid", "paid");
    const asFree = { key: free.key };
    for (const [retention, field, at] of [
      [{ events: 501 }, "retention.events", /retention\.events may be at most 500 for a free account/],
      [{ days: 31 }, "retention.days", /retention\.days may be at most 30 for a free account/],
    ] as const) {
      const created = await limited.api("POST", "/v1/sources", {
        ...asFree,
        body: { component_code: burst, retention },
      });
      assertApiError(created, { status: 400, code: "invalid_parameter" });
      assert.equal(created.body.details.field, field);
      assert.match(created.body.error, at);
    }
    const created = await limited.api("POST", "/v1/sources", {
      ...asFree,
      body: { component_code: burst, retention: { events: 500 } },
    });
    assert.equal(created.status, 200, created.text);
    assert.deepEqual(created.body.data.retention, { events: 500, days: 30 });
    const id = created.body.data.id;
    const over = await limited.api("PUT", `/v1/sources/${id}`, {
      ...asFree,
      body: { retention: { events: 501 } },
    });
    assertApiError(over, { status: 400, code: "invalid_parameter" });
    const shorter = await limited.api("PUT", `/v1/sources/${id}`, {
      ...asFree,
      body: { retention: { days: 7 } },
    });
    assert.equal(shorter.status, 200, shorter.text);
    assert.deepEqual(shorter.body.data.retention, { days: 7 });
    // null is the instance's default (100 a channel, no age), which every account may keep.
    const reset = await limited.api("PUT", `/v1/sources/${id}`, { ...asFree, body: { retention: null } });
    assert.equal(reset.body.data.retention, null);
    // A paid account is held to the instance's maximum only, and no age is added.
    const big = await limited.api("POST", "/v1/sources", {
      key: paid.key,
      body: { component_code: burst, retention: { events: 100_000 } },
    });
    assert.equal(big.status, 200, big.text);
    assert.deepEqual(big.body.data.retention, { events: 100_000 });
  } finally {
    await limited.close();
  }
});
