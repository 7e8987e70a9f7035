/**
 * The live stream `GET /sources/{id}/sse`, with a real server, real sources and the `eventsource` client:
 * frame format, channels, Last-Event-ID replay, the replay/live seam, keep-alives, auth and tenancy
 * errors, slow and vanished clients, and fan-out to many clients.
 */
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, test } from "node:test";
import { EventSource, type FetchLike, type FetchLikeResponse } from "eventsource";
import { Agent, fetch as undiciFetch } from "undici";
import { defaultStreamHubOptions, type StreamHub } from "../../src/domain/events/stream-hub.ts";
import type { EventRecord } from "../../src/domain/types.ts";
import { streamHubOf } from "../../src/http/routes/stream.ts";
import { adminKey, startServer, type TestServer } from "../helpers.ts";

/** Emits the request body (or `copies` padded copies of it) on the channel `body.channel`. */
const probeCode = `export default {
  name: "sse-probe",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  run(e) {
    const b = e.body ?? {};
    if (b.log) console.log(b.log);
    for (let i = 0; i < (b.copies ?? 1); i++) {
      this.$emit(b.pad ? { ...b, i, pad: "x".repeat(b.pad) } : b, { summary: "x", name: b.channel });
    }
  },
};
`;

let server: TestServer;
let hub: StreamHub;
/** The SSE clients' own connection pool, destroyed before the server closes: an aborted stream can leave
 * a fresh idle connection in a pool, and the server would wait for it. */
let agent: Agent;

before(async () => {
  server = await startServer();
  hub = streamHubOf(server.built.services)!;
  assert.ok(hub, "the stream plugin registers a hub");
  // Clients told to reconnect soon, so reconnect tests stay short.
  hub.configure({ retryMs: 300 });
  agent = new Agent();
});
after(async () => {
  await agent.destroy();
  await server.close();
});

interface Source {
  id: string;
  endpoint: string;
}

async function deploy(key = adminKey): Promise<Source> {
  const res = await server.api("POST", "/v1/sources", { key, body: { component_code: probeCode } });
  assert.equal(res.status, 200, res.text);
  return { id: res.body.data.id, endpoint: res.body.data.endpoint_url };
}

/** Invokes the source; resolves once its events are committed (and published). */
async function emit(source: Source, body: Record<string, unknown>): Promise<void> {
  const res = await fetch(source.endpoint, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  await res.text();
  assert.equal(res.status, 200);
}

/** Stored IDs of a channel, oldest first. */
async function storedIds(sourceId: string, eventName = ""): Promise<string[]> {
  const res = await server.api(
    "GET",
    `/v1/sources/${sourceId}/event_summaries?limit=100&event_name=${encodeURIComponent(eventName)}`,
  );
  assert.equal(res.status, 200, res.text);
  return (res.body.data as Array<{ id: string }>).map((e) => e.id).reverse();
}

function withKey(key: string, headers: Record<string, string> = {}): FetchLike {
  return (url, init) =>
    undiciFetch(url, {
      ...init,
      dispatcher: agent,
      // The client's own headers (its Last-Event-ID on reconnect) win over ours.
      headers: { ...headers, ...init.headers, authorization: `Bearer ${key}` },
    }) as unknown as Promise<FetchLikeResponse>;
}

function idOrder(id: string): [number, number] {
  const [ms, seq] = id.split("-").map(Number);
  return [ms!, seq!];
}

function assertIncreasing(ids: string[]): void {
  for (let i = 1; i < ids.length; i++) {
    const [a, b] = [idOrder(ids[i - 1]!), idOrder(ids[i]!)];
    assert.ok(b[0] > a[0] || (b[0] === a[0] && b[1] > a[1]), `${ids[i]} follows ${ids[i - 1]}`);
  }
}

/** Waits for a condition the hub reaches on its own (sockets closing); checks every 10 ms. */
async function eventually(check: () => boolean, what: string, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

interface Received {
  id: string;
  data: any;
  /** Date.now() on arrival. */
  at: number;
}

/** An `eventsource` client that records what it receives. */
class Listener {
  readonly es: EventSource;
  readonly messages: Received[] = [];
  opens = 0;
  errors: Array<{ code?: number; message?: string }> = [];
  #waiters = new Set<() => void>();

  constructor(path: string, key = adminKey, headers: Record<string, string> = {}) {
    this.es = new EventSource(server.url + path, { fetch: withKey(key, headers) });
    this.es.addEventListener("message", (ev) => {
      this.messages.push({ id: ev.lastEventId, data: JSON.parse(ev.data), at: Date.now() });
      this.#notify();
    });
    this.es.addEventListener("open", () => {
      this.opens++;
      this.#notify();
    });
    this.es.addEventListener("error", (ev) => {
      this.errors.push({ code: ev.code, message: ev.message });
      this.#notify();
    });
  }

  get ns(): unknown[] {
    return this.messages.map((m) => m.data.event.n);
  }

  until(check: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
    if (check()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#waiters.delete(wake);
        reject(
          new Error(
            `timed out waiting for ${what}; got ${this.messages.length} messages, ${this.opens} opens`,
          ),
        );
      }, timeoutMs);
      const wake = () => {
        if (!check()) return;
        clearTimeout(timer);
        this.#waiters.delete(wake);
        resolve();
      };
      this.#waiters.add(wake);
    });
  }

  opened(): Promise<void> {
    return this.until(() => this.opens > 0, "the stream to open");
  }

  count(n: number): Promise<void> {
    return this.until(() => this.messages.length >= n, `${n} messages`);
  }

  close(): void {
    this.es.close();
  }

  #notify(): void {
    for (const wake of [...this.#waiters]) wake();
  }
}

/** A stream read as raw text. */
async function rawStream(path: string, headers: Record<string, string> = {}) {
  const controller = new AbortController();
  const res = await undiciFetch(server.url + path, {
    headers: { authorization: `Bearer ${adminKey}`, ...headers },
    dispatcher: agent,
    signal: controller.signal,
  });
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = "";
  return {
    res,
    async readUntil(check: (text: string) => boolean, timeoutMs = 5_000): Promise<string> {
      const timer = setTimeout(() => controller.abort(), timeoutMs);
      try {
        while (!check(text)) {
          const { value, done } = await reader.read();
          if (done) break;
          text += decoder.decode(value, { stream: true });
        }
      } finally {
        clearTimeout(timer);
      }
      return text;
    },
    close: () => controller.abort(),
  };
}

test("each emit arrives as `id:` and one `data:` line holding the untruncated event_summaries entry", async () => {
  const source = await deploy();
  const stream = await rawStream(`/sources/${source.id}/sse`);
  assert.equal(stream.res.status, 200);
  assert.equal(stream.res.headers.get("content-type"), "text/event-stream");
  assert.equal(stream.res.headers.get("cache-control"), "no-cache");
  assert.equal(stream.res.headers.get("x-accel-buffering"), "no");
  assert.ok(stream.res.headers.get("x-request-id"));
  const opening = await stream.readUntil((t) => t.includes("\n\n"));
  assert.match(opening, /^:ok\nretry: \d+\n\n$/);

  await emit(source, { n: 1, text: "two\nlines" });
  await emit(source, { n: 2, pad: 3000 });
  const text = await stream.readUntil((t) => t.split("\n\n").length >= 4);
  stream.close();
  const frames = text.split("\n\n").slice(1, 3);
  const stored = await server.api("GET", `/v1/sources/${source.id}/event_summaries?expand=event`);
  const expected = [...stored.body.data].reverse();
  for (const [i, frame] of frames.entries()) {
    const m = /^id: (\d+-\d+)\ndata: (.+)$/.exec(frame);
    assert.ok(m, `frame is exactly an id line and one data line: ${JSON.stringify(frame.slice(0, 200))}`);
    assert.doesNotMatch(frame, /^event:/m);
    const entry = JSON.parse(m[2]!);
    assert.equal(entry.id, m[1]);
    assert.deepEqual(entry, expected[i]);
  }
  const big = JSON.parse(frames[1]!.split("\ndata: ")[1]!);
  assert.equal(big.event.pad.length, 3000, "data over 1 KB is not truncated");
  assert.equal(big.event.$truncated, undefined);
  assert.deepEqual(Object.keys(big.metadata).sort(), ["emit_id", "emitter_id", "name", "summary"]);
  assert.equal(big.metadata.name, "");
  assert.equal(big.metadata.emitter_id, source.id);
});

test("event_name picks the channel: default (empty or `default`), $logs and a custom name", async () => {
  const source = await deploy();
  const plain = new Listener(`/sources/${source.id}/sse`);
  const named = new Listener(`/sources/${source.id}/sse?event_name=default`);
  const logs = new Listener(`/sources/${source.id}/sse?event_name=%24logs`);
  const alerts = new Listener(`/sources/${source.id}/sse?event_name=alerts`);
  const all = [plain, named, logs, alerts];
  try {
    await Promise.all(all.map((l) => l.opened()));
    await emit(source, { n: 1, log: "hello from run" });
    await emit(source, { n: 2, channel: "alerts" });
    await emit(source, { n: 3 });
    await Promise.all([plain.count(2), named.count(2), logs.count(1), alerts.count(1)]);
    assert.deepEqual(plain.ns, [1, 3]);
    assert.deepEqual(named.ns, [1, 3]);
    assert.deepEqual(alerts.ns, [2]);
    assert.equal(alerts.messages[0]!.data.metadata.name, "alerts");
    assert.equal(logs.messages[0]!.data.event.message, "hello from run");
    assert.equal(logs.messages[0]!.data.metadata.name, "$logs");
    assert.equal(logs.messages.length, 1);
  } finally {
    for (const l of all) l.close();
  }
});

test("Last-Event-ID replays the stored events after it, oldest first, then the stream goes live", async () => {
  const source = await deploy();
  for (let n = 1; n <= 5; n++) await emit(source, { n });
  const ids = await storedIds(source.id);
  assert.equal(ids.length, 5);

  // As a query parameter...
  const byQuery = new Listener(`/sources/${source.id}/sse?last_event_id=${ids[1]}`);
  // ...and as the header a reconnecting client sends.
  const byHeader = new Listener(`/sources/${source.id}/sse`, adminKey, { "Last-Event-ID": ids[3]! });
  // An ID older than anything kept replays everything kept.
  const fromOld = new Listener(`/sources/${source.id}/sse?last_event_id=1-0`);
  try {
    await Promise.all([byQuery.count(3), byHeader.count(1), fromOld.count(5)]);
    assert.deepEqual(byQuery.ns, [3, 4, 5]);
    assert.deepEqual(
      byQuery.messages.map((m) => m.id),
      ids.slice(2),
    );
    assert.deepEqual(byHeader.ns, [5]);
    assert.deepEqual(fromOld.ns, [1, 2, 3, 4, 5]);

    await emit(source, { n: 6 });
    await Promise.all([byQuery.count(4), byHeader.count(2), fromOld.count(6)]);
    assert.deepEqual(byQuery.ns, [3, 4, 5, 6]);
    assert.deepEqual(byHeader.ns, [5, 6]);
  } finally {
    for (const l of [byQuery, byHeader, fromOld]) l.close();
  }

  // The newest ID replays nothing.
  const upToDate = await rawStream(`/sources/${source.id}/sse`, {
    "last-event-id": (await storedIds(source.id)).at(-1)!,
  });
  assert.equal(await upToDate.readUntil((t) => t.includes("\n\n")), `:ok\nretry: 300\n\n`);
  upToDate.close();
});

test("a client reconnecting while events are emitted receives every event exactly once, in order", async (t) => {
  const source = await deploy();
  // Told at connection time: reconnect 100 ms after the stream ends.
  hub.configure({ retryMs: 100 });
  const l = new Listener(`/sources/${source.id}/sse`);
  try {
    await l.opened();
    let n = 0;
    for (; n < 3; n++) await emit(source, { n });
    await l.count(3);

    // The server ends the stream; the client waits `retry` and reconnects with Last-Event-ID.
    assert.equal(hub.endEmitter(source.id), 1);
    let whileDown = 0;
    for (let k = 0; k < 3; k++) {
      await emit(source, { n: n++ });
      if (l.es.readyState === EventSource.CONNECTING) whileDown++;
    }
    // Two emitters race the reconnection and its replay, and go on a little after it. They stop at 80
    // events until the client is back, since only the last 100 are kept for the replay.
    let after = 6;
    await Promise.all(
      [0, 1].map(async () => {
        for (;;) {
          if (l.opens < 2 && n >= 80) await l.until(() => l.opens >= 2, "the reconnection");
          if (l.opens >= 2 && after-- <= 0) break;
          await emit(source, { n: n++ });
        }
      }),
    );
    const total = n;
    await l.count(total);
    // Nothing more arrives: no duplicate came late.
    await emit(source, { n: total });
    await l.count(total + 1);

    t.diagnostic(`${total + 1} events, ${whileDown} of them emitted while the client was disconnected`);
    assert.ok(whileDown > 0, "some events were emitted while the client was disconnected");
    assert.equal(l.opens, 2);
    assert.equal(l.messages.length, total + 1);
    assert.deepEqual(
      [...l.ns].sort((a, b) => (a as number) - (b as number)),
      Array.from({ length: total + 1 }, (_, i) => i),
    );
    const ids = l.messages.map((m) => m.id);
    assertIncreasing(ids);
    assert.deepEqual(ids, await storedIds(source.id));
  } finally {
    l.close();
    hub.configure({ retryMs: 300 });
  }
});

test("events committed while the replay is being read are sent once, at their place", async () => {
  const source = await deploy();
  for (let n = 0; n < 3; n++) await emit(source, { n });
  const [first] = await storedIds(source.id);
  const store = server.built.services.store;
  const listEvents = store.listEvents;
  let patched = false;
  store.listEvents = async (emitterId, query) => {
    store.listEvents = listEvents;
    patched = true;
    // Committed (and published) after the stream subscribed but before the read: read and held.
    await emit(source, { n: 3 });
    const page = await listEvents.call(store, emitterId, query);
    // Committed after the read: only held.
    await emit(source, { n: 4 });
    return page;
  };
  const l = new Listener(`/sources/${source.id}/sse?last_event_id=${first}`);
  try {
    await l.count(4);
    await emit(source, { n: 5 });
    await l.count(5);
    assert.ok(patched, "the replay read the store");
    assert.deepEqual(l.ns, [1, 2, 3, 4, 5]);
    const ids = l.messages.map((m) => m.id);
    assertIncreasing(ids);
    assert.deepEqual(ids, (await storedIds(source.id)).slice(1));
  } finally {
    store.listEvents = listEvents;
    l.close();
  }
});

test("an idle stream gets `:keepalive` comments", async () => {
  const source = await deploy();
  hub.configure({ keepaliveMs: 50 });
  try {
    const stream = await rawStream(`/sources/${source.id}/sse`);
    const text = await stream.readUntil((t) => t.split(":keepalive\n\n").length > 2);
    stream.close();
    assert.match(text, /^:ok\nretry: 300\n\n:keepalive\n\n:keepalive\n\n/);
  } finally {
    hub.configure({ keepaliveMs: defaultStreamHubOptions.keepaliveMs });
  }
});

test("no key or a bad key is a 401, an unknown or another user's source a 404, as JSON", async () => {
  const source = await deploy();
  const other = await server.createUser(`sse-other-${Date.now()}`);
  const path = `/sources/${source.id}/sse`;
  const cases: Array<[string, Record<string, string>, number, string]> = [
    [path, {}, 401, "unauthorized"],
    [path, { authorization: "Bearer fnt_nosuchkey" }, 401, "unauthorized"],
    [path, { authorization: `Bearer ${other.key}` }, 404, "not_found"],
    ["/sources/dc_doesnotexist/sse", { authorization: `Bearer ${adminKey}` }, 404, "not_found"],
    [`${path}?last_event_id=yesterday`, { authorization: `Bearer ${adminKey}` }, 400, "invalid_parameter"],
    [path, { authorization: `Bearer ${adminKey}`, "last-event-id": "1-2-3" }, 400, "invalid_parameter"],
    [`${path}?event_name=no%20spaces`, { authorization: `Bearer ${adminKey}` }, 400, "invalid_parameter"],
  ];
  for (const [p, headers, status, code] of cases) {
    const res = await fetch(server.url + p, { headers });
    assert.equal(res.status, status, `${p} ${JSON.stringify(headers)}`);
    assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
    const body = (await res.json()) as { error: string; code: string };
    assert.equal(body.code, code);
    assert.equal(typeof body.error, "string");
  }
  // The real client gives up on a 404 instead of retrying.
  const intruder = new Listener(path, other.key);
  try {
    await intruder.until(() => intruder.errors.length > 0, "an error");
    assert.equal(intruder.errors[0]!.code, 404);
    assert.equal(intruder.es.readyState, EventSource.CLOSED);
  } finally {
    intruder.close();
  }
  // The other user streams their own sources.
  const theirs = await deploy(other.key);
  const own = new Listener(`/sources/${theirs.id}/sse`, other.key);
  try {
    await own.opened();
    await emit(theirs, { n: 1 });
    await own.count(1);
  } finally {
    own.close();
  }
});

test("a client that never reads does not hold up emits to others and is dropped", async (t) => {
  const source = await deploy();
  hub.configure({ maxQueuedEvents: 20, maxQueuedBytes: 256 * 1024, stallMs: 500 });
  const fast = new Listener(`/sources/${source.id}/sse`);
  const url = new URL(server.url);
  const slow = net.connect({ host: url.hostname, port: Number(url.port) });
  try {
    await fast.opened();
    const baseline = hub.size();
    // No 'data' listener: once its small read buffer is full, the socket leaves everything in the kernel.
    slow.write(
      `GET /sources/${source.id}/sse HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${adminKey}\r\n\r\n`,
    );
    await eventually(() => hub.size() === baseline + 1, "the slow client to connect");
    const droppedBefore = hub.stats().dropped;

    // 800 KB per invocation: the kernel's socket buffers (a few MB) fill, then the hub's queue.
    const durations: number[] = [];
    let invocations = 0;
    while (hub.stats().dropped === droppedBefore) {
      assert.ok(invocations < 60, "the slow client is dropped before 48 MB were emitted");
      const started = performance.now();
      await emit(source, { n: invocations++, copies: 4, pad: 200_000 });
      durations.push(performance.now() - started);
    }
    assert.equal(hub.size(), baseline, "the dropped client left the hub");
    await fast.count(invocations * 4);
    assert.equal(fast.messages.length, invocations * 4);
    assert.equal(fast.opens, 1, "the fast client was never cut off");
    durations.sort((a, b) => a - b);
    t.diagnostic(`dropped after ${invocations} invocations of 800 KB; emit ms ${durations.map(Math.round)}`);
    // The emits kept their pace while the slow client's buffers filled up.
    const median = durations[Math.floor(durations.length / 2)]!;
    assert.ok(
      durations.at(-1)! < Math.max(1_000, median * 20),
      `emit durations ${durations.map(Math.round)}`,
    );
  } finally {
    slow.destroy();
    fast.close();
    hub.configure({
      maxQueuedEvents: defaultStreamHubOptions.maxQueuedEvents,
      maxQueuedBytes: defaultStreamHubOptions.maxQueuedBytes,
      stallMs: defaultStreamHubOptions.stallMs,
    });
  }
});

test("200 clients each receive every event, and leave the hub empty when they disconnect", async (t) => {
  const source = await deploy();
  const baseline = hub.size();
  const clients = Array.from({ length: 200 }, () => new Listener(`/sources/${source.id}/sse`));
  try {
    await Promise.all(clients.map((c) => c.opened()));
    assert.equal(hub.size(), baseline + 200);
    const stored: EventRecord[] = [];
    const off = server.built.services.bus.on("event.stored", (e) => {
      if (e.emitterId === source.id) stored.push(e);
    });
    for (let n = 0; n < 5; n++) await emit(source, { n });
    off();
    await Promise.all(clients.map((c) => c.count(5)));
    const latencies: number[] = [];
    for (const c of clients) {
      assert.deepEqual(c.ns, [0, 1, 2, 3, 4]);
      for (const [i, m] of c.messages.entries()) latencies.push(m.at - stored[i]!.indexedAtMs);
    }
    latencies.sort((a, b) => a - b);
    const p = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))]!;
    // Not the benchmark (server and clients share this process and its event loop), only a sanity bound.
    assert.ok(p(0.99) < 1_000, `p99 emit-to-client ${p(0.99)} ms`);
    t.diagnostic(`200 clients, commit-to-client ms: p50 ${p(0.5)}, p99 ${p(0.99)}, max ${p(1)}`);
  } finally {
    for (const c of clients) c.close();
  }
  await eventually(() => hub.size() === baseline, "disconnected clients to leave the hub");
  if (baseline === 0) assert.equal(hub.stats().emitters, 0);
});

test("a vanished client is removed from the hub", async () => {
  const source = await deploy();
  const baseline = hub.size();
  const url = new URL(server.url);
  const socket = net.connect({ host: url.hostname, port: Number(url.port) });
  socket.write(
    `GET /sources/${source.id}/sse HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${adminKey}\r\n\r\n`,
  );
  await eventually(() => hub.size() === baseline + 1, "the client to connect");
  socket.destroy();
  await eventually(() => hub.size() === baseline, "the client to leave");
  // Emits to a source nobody listens to cost nothing and fail nothing.
  await emit(source, { n: 1 });
});

test("deleting the source ends its open streams", async () => {
  const source = await deploy();
  const baseline = hub.size();
  const stream = await rawStream(`/sources/${source.id}/sse`);
  await eventually(() => hub.size() === baseline + 1, "the client to connect");
  const ended = stream.readUntil(() => false);
  const res = await server.api("DELETE", `/v1/sources/${source.id}`);
  assert.equal(res.status, 200, res.text);
  // readUntil returns when the body ends (not by its timeout, which would abort with an error).
  await ended;
  await eventually(() => hub.size() === baseline, "the hub to drop the client");
});

test("every stream, one channel or several, opens with one `:ok` and one `retry:` and is never compressed", async () => {
  // Logs a line and fails: one event on $logs and one on $errors, the two channels of /observations.
  const res = await server.api("POST", "/v1/sources", {
    body: {
      component_code: `export default {
        name: "sse-observed",
        version: "0.0.1",
        props: { http: "$.interface.http" },
        run() { console.log("a line"); throw new Error("went wrong"); },
      };`,
    },
  });
  assert.equal(res.status, 200, res.text);
  const source: Source = { id: res.body.data.id, endpoint: res.body.data.endpoint_url };
  const paths = [
    `/sources/${source.id}/sse`,
    `/sse/dc/${source.id}/emits`,
    `/sse/dc/${source.id}/observations`,
  ];
  for (const path of paths) {
    const stream = await rawStream(path, { "accept-encoding": "br, gzip" });
    try {
      assert.equal(stream.res.headers.get("content-type"), "text/event-stream");
      assert.equal(stream.res.headers.get("content-encoding"), null, `${path} is not compressed`);
      if (path.endsWith("observations")) {
        // The $errors frame is written after its channel's start, so a second preamble would be in the text.
        await fetch(source.endpoint, { method: "POST" }).then((r) => r.text());
        const text = await stream.readUntil((t) => (t.match(/^data: /gm) ?? []).length >= 2);
        assert.equal((text.match(/^data: /gm) ?? []).length, 2, text);
        assert.equal((text.match(/^:ok$/gm) ?? []).length, 1, text);
        assert.equal((text.match(/^retry: /gm) ?? []).length, 1, text);
      } else {
        const text = await stream.readUntil((t) => t.includes("\n\n"));
        assert.match(text, /^:ok\nretry: \d+\n\n$/);
      }
    } finally {
      stream.close();
    }
  }
});

test("an open stream ends as soon as its key is revoked, or its user leaves the organization whose source it streams", async () => {
  // The periodic check an hour away: the revocation itself makes the streams check their access.
  hub.configure({ recheckMs: 3_600_000 });
  try {
    const bob = await server.createUser(`sse-leaver-${process.pid}`);
    const org = await server.api("POST", "/v1/admin/orgs", {
      body: {
        orgname: `sse-org-${process.pid}`,
        owner_id: (await server.api("GET", "/v1/users/me")).body.data.id,
      },
    });
    assert.equal(org.status, 200, org.text);
    const orgId = org.body.data.id as string;
    await server.api("POST", `/v1/admin/orgs/${orgId}/members`, { body: { user_id: bob.id } });
    const made = await server.api("POST", "/v1/sources", {
      body: { component_code: probeCode, org_id: orgId },
    });
    assert.equal(made.status, 200, made.text);
    const path = `/sources/${made.body.data.id}/sse`;
    const second = await server.api("POST", `/v1/admin/users/${bob.id}/keys`, { body: { name: "second" } });
    assert.equal(second.status, 200, second.text);

    const byKey = await rawStream(path, { authorization: `Bearer ${second.body.data.api_key}` });
    assert.equal(byKey.res.status, 200);
    const keyEnded = byKey.readUntil(() => false, 20_000);
    assert.equal((await server.api("DELETE", `/v1/admin/keys/${second.body.data.id}`)).status, 200);
    // The body ends (readUntil's timeout would abort it with an error instead).
    await keyEnded;

    const byMember = await rawStream(path, { authorization: `Bearer ${bob.key}` });
    assert.equal(byMember.res.status, 200);
    const memberEnded = byMember.readUntil(() => false, 20_000);
    const left = await server.api("DELETE", `/v1/admin/orgs/${orgId}/members?user_id=${bob.id}`);
    assert.equal(left.status, 200, left.text);
    await memberEnded;
  } finally {
    hub.configure({ recheckMs: defaultStreamHubOptions.recheckMs });
  }
});

test("a user has at most FOUNT_SSE_MAX_STREAMS streams open at once; a closed one makes room", async () => {
  const carol = await server.createUser(`sse-many-${process.pid}`);
  const source = await deploy(carol.key);
  const path = `/sources/${source.id}/sse`;
  const headers = { authorization: `Bearer ${carol.key}` };
  hub.configure({ maxStreamsPerUser: 2 });
  const streams = [];
  try {
    streams.push(await rawStream(path, headers), await rawStream(path, headers));
    const refused = await server.api("GET", path, { key: carol.key });
    assert.equal(refused.status, 429, refused.text);
    assert.equal(refused.body.code, "rate_limited");
    // Another user's streams are counted on their own.
    const admins = await rawStream(`/sources/${(await deploy()).id}/sse`);
    streams.push(admins);
    assert.equal(admins.res.status, 200);
    const baseline = hub.size();
    streams.shift()!.close();
    await eventually(() => hub.size() === baseline - 1, "the closed stream to leave");
    const again = await rawStream(path, headers);
    streams.push(again);
    assert.equal(again.res.status, 200);
  } finally {
    for (const s of streams) s.close();
    hub.configure({ maxStreamsPerUser: defaultStreamHubOptions.maxStreamsPerUser });
  }
});
