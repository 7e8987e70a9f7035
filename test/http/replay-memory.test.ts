/**
 * A bulk replay (`POST /v1/sources/{id}/events/replay`) of large events, with a real server: it reads
 * the matching events a page of at most 4 MiB at a time, writing each page's deliveries before the next
 * is read, still oldest first, with the exact count, and still refuses more than 10,000 matches.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { maxReplayedEvents, replayPageBytes } from "../../src/delivery/replay.ts";
import type { EventRecord } from "../../src/domain/types.ts";
import { fixture } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";
import { assertApiError } from "./openapi-walk.ts";

const bigCode = fixture("big-events.mjs");

let server: TestServer;

before(async () => {
  server = await startServer();
});
after(async () => {
  await server.close();
});

async function deploy(): Promise<{ id: string; endpoint: string }> {
  const res = await server.api("POST", "/v1/sources", {
    body: { component_code: bigCode, retention: { events: 2 * maxReplayedEvents } },
  });
  assert.equal(res.status, 200, res.text);
  return { id: res.body.data.id, endpoint: res.body.data.endpoint_url };
}

async function emit(endpoint: string, body: Record<string, unknown>): Promise<void> {
  const res = await fetch(endpoint, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  await res.text();
  assert.equal(res.status, 200);
}

/** A webhook nobody listens at: the deliveries stay queued, which is all these tests look at. */
async function webhook(): Promise<string> {
  const res = await server.api("POST", "/v1/webhooks", { body: { url: "https://example.invalid/hook" } });
  assert.equal(res.status, 200, res.text);
  return res.body.data.id;
}

test("a bulk replay of large events reads them 4 MiB at a time, and queues every one oldest first", async () => {
  const source = await deploy();
  // 24 events of 700 KB: 16 MiB in all, more than four pages' worth.
  for (let from = 0; from < 24; from += 8) await emit(source.endpoint, { copies: 8, from, pad: 700_000 });
  const hook = await webhook();
  const store = server.built.services.store;
  const search = store.searchEvents;
  const pages: number[] = [];
  store.searchEvents = async (s, page) => {
    const found = await search.call(store, s, page);
    if (s.emitterId === source.id)
      pages.push(found.items.reduce((n, e) => n + JSON.stringify(e.event).length, 0));
    return found;
  };
  let res: Awaited<ReturnType<TestServer["api"]>>;
  try {
    res = await server.api("POST", `/v1/sources/${source.id}/events/replay`, { body: { listener_id: hook } });
  } finally {
    store.searchEvents = search;
  }
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.data.matching, 24);
  assert.equal(res.body.data.replayed, 24);
  assert.ok(pages.length > 4, `pages read: ${pages.length}`);
  assert.ok(
    pages.every((bytes) => bytes <= replayPageBytes),
    `every page read holds at most ${replayPageBytes} bytes of events: ${pages.join(", ")}`,
  );
  const list = await server.api("GET", `/v1/webhooks/${hook}/deliveries?limit=100`);
  assert.equal(list.status, 200, list.text);
  const ids = (list.body.data as Array<{ event_id: string; replay: { id: string } }>).reverse();
  assert.equal(ids.length, 24);
  const stored = (await store.listEvents(source.id, { channel: "", limit: 100 })).items.reverse();
  assert.deepEqual(
    ids.map((d) => d.event_id),
    stored.map((e) => e.id),
    "queued oldest first",
  );
  assert.ok(ids.every((d) => d.replay.id === res.body.data.replay_id));
});

test(`a bulk replay still refuses more than ${maxReplayedEvents} matches, before it queues any`, async () => {
  const source = await deploy();
  const hook = await webhook();
  const store = server.built.services.store;
  const event = (n: number): EventRecord => ({
    emitterId: source.id,
    channel: "",
    id: `1000-${n}`,
    idMs: 1000,
    idSeq: n,
    indexedAtMs: 1000,
    event: { n },
    meta: { emit_id: `e${n}`, name: "", emitter_id: source.id },
  });
  await store.transaction(async (tx) => {
    for (let n = 0; n <= maxReplayedEvents; n++) await tx.insertEvent(event(n));
  });
  const path = `/v1/sources/${source.id}/events/replay`;
  assertApiError(await server.api("POST", path, { body: { listener_id: hook } }), {
    status: 400,
    code: "invalid_parameter",
  });
  const count = await server.api("POST", path, { body: { listener_id: hook, dry_run: true, since: 1001 } });
  assert.deepEqual(count.body.data, { replayed: 0, matching: 0, replay_id: null });
  const list = await server.api("GET", `/v1/webhooks/${hook}/deliveries?limit=10`);
  assert.equal(list.body.data.length, 0, "nothing queued");
});
