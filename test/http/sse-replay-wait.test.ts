/**
 * How long an SSE resume waits for one of its user's replay turns (FOUNT_SSE_REPLAY_WAIT_MS), with a real
 * server and the `eventsource` client: past the wait it is answered with a `retry:` and ended, which the
 * client takes as a dropped connection and reconnects; and each user's record of streams on the node is
 * gone once their streams end, however they ended.
 */
import assert from "node:assert/strict";
import type { IncomingMessage, ServerResponse } from "node:http";
import net from "node:net";
import { after, before, test } from "node:test";
import { EventSource, type FetchLike, type FetchLikeResponse } from "eventsource";
import { Agent, fetch as undiciFetch } from "undici";
import type { StreamHub } from "../../src/domain/events/stream-hub.ts";
import { streamHubOf, streamUsersOf } from "../../src/http/routes/stream.ts";
import type { StreamUsers } from "../../src/http/stream-users.ts";
import { deployBigEvents } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
let hub: StreamHub;
let users: StreamUsers;
/** The EventSource clients' own connection pool, destroyed before the server closes. */
let agent: Agent;

before(async () => {
  // One replay at a time per user, and a short wait for it.
  server = await startServer({ sseMaxReplays: 1, sseReplayWaitMs: 500 });
  hub = streamHubOf(server.built.services)!;
  users = streamUsersOf(server.built.services)!;
  // Clients told to reconnect soon, so the reconnections stay short.
  hub.configure({ retryMs: 200 });
  agent = new Agent();
});
after(async () => {
  await agent.destroy();
  await server.close();
});

/**
 * A raw stream, resuming from the first event unless `live`; `text()` is what arrived, read only when
 * `reading`; `ended` resolves with everything once the server ended the response.
 */
function openStream(sourceId: string, key: string, options: { reading: boolean; live?: boolean }) {
  const socket = net.connect(Number(new URL(server.url).port), "127.0.0.1");
  socket.on("error", () => {});
  const resume = options.live ? "" : "?last_event_id=1-0";
  socket.write(
    `GET /sources/${sourceId}/sse${resume} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${key}\r\n\r\n`,
  );
  let text = "";
  const head = new Promise<string>((resolve) => {
    socket.once("data", (chunk) => {
      text += chunk.toString("latin1");
      // A client that stops reading: its replay stays in progress, its socket full.
      if (!options.reading) socket.pause();
      else socket.on("data", (more) => (text += more.toString("latin1")));
      resolve(text.split("\r\n")[0]!);
    });
  });
  // The response's end: its last chunk (the connection may stay open for another request), or the close.
  const ended = new Promise<string>((resolve) => {
    socket.on("data", () => {
      if (text.endsWith("\r\n0\r\n\r\n")) resolve(text);
    });
    socket.once("close", () => resolve(text));
  });
  return {
    head,
    ended,
    text: () => text,
    close: () => socket.destroy(),
    /** Leaves as a broken connection does: a TCP reset rather than a FIN. */
    reset: () => socket.resetAndDestroy(),
  };
}

async function eventually(check: () => boolean, what: string, ms = 30_000): Promise<void> {
  const until = Date.now() + ms;
  while (!check()) {
    if (Date.now() > until) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A promise opened by hand. */
function gate(): { opened: Promise<void>; open: () => void } {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

/** `promise`, or a failure naming `what` after `ms`. */
async function within<T>(promise: Promise<T>, what: string, ms = 20_000): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

test("a resume waiting longer than FOUNT_SSE_REPLAY_WAIT_MS is told to reconnect later; its EventSource does, and replays everything once a turn is free", async () => {
  const dora = await server.createUser(`sse-wait-${process.pid}`);
  // 12 events of 700 KB: more than the sockets' buffers take, so a client that reads nothing keeps its
  // replay, and the user's one turn, going.
  const sourceId = await deployBigEvents(server, 12, 700_000, dora.key);
  const streams: Array<ReturnType<typeof openStream>> = [];
  let es: EventSource | undefined;
  try {
    const stalled = openStream(sourceId, dora.key, { reading: false });
    streams.push(stalled);
    assert.match(await stalled.head, / 200 /);

    // While the turn is held, the next resume gets a 200 event stream with `retry:` and nothing else,
    // ended by the server: what an EventSource reconnects after (a 429 or 503 would stop it for good).
    const waiting = openStream(sourceId, dora.key, { reading: true });
    streams.push(waiting);
    const answer = await within(waiting.ended, "the waiting resume's answer");
    const [head, body = ""] = answer.split("\r\n\r\n");
    assert.match(head!, /^HTTP\/1\.1 200 /);
    assert.match(head!, /content-type: text\/event-stream/i);
    assert.match(body, /^retry: 200$/m);
    assert.doesNotMatch(body, /^(id|data):/m, "nothing of the replay was sent");

    // An EventSource told so comes back on its own, again and again while the turn is held, and is
    // never closed for good.
    let attempts = 0;
    const received: string[] = [];
    const withKey: FetchLike = (url, init) => {
      attempts++;
      return undiciFetch(url, {
        ...init,
        dispatcher: agent,
        headers: { ...init.headers, authorization: `Bearer ${dora.key}` },
      }) as unknown as Promise<FetchLikeResponse>;
    };
    es = new EventSource(`${server.url}/sources/${sourceId}/sse?last_event_id=1-0`, { fetch: withKey });
    es.onmessage = (m) => received.push(m.lastEventId);
    await eventually(() => attempts >= 3, "the client to reconnect twice");
    assert.notEqual(es.readyState, EventSource.CLOSED);
    assert.equal(received.length, 0);

    // Once the turn is free, a later attempt replays everything.
    stalled.close();
    await eventually(() => received.length === 12, "every event through the EventSource");
    const again = openStream(sourceId, dora.key, { reading: true });
    streams.push(again);
    assert.match(await again.head, / 200 /);
  } finally {
    es?.close();
    for (const s of streams) s.close();
  }
});

test("a user's record of streams is gone once their streams end, however they ended", async () => {
  const erin = await server.createUser(`sse-record-${process.pid}`);
  const sourceId = await deployBigEvents(server, 12, 700_000, erin.key);
  assert.equal(users.has(erin.id), false);
  const store = server.built.services.store;
  const list = store.listEvents;
  const streams: Array<ReturnType<typeof openStream>> = [];
  try {
    // A live stream, a replay that holds the turn, one waiting for it that is told to come back, and one
    // that leaves while it waits.
    const live = openStream(sourceId, erin.key, { reading: true, live: true });
    const stalled = openStream(sourceId, erin.key, { reading: false });
    streams.push(live, stalled);
    assert.match(await live.head, / 200 /);
    assert.match(await stalled.head, / 200 /);
    assert.equal(users.has(erin.id), true);
    const toldLater = openStream(sourceId, erin.key, { reading: true });
    const leaving = openStream(sourceId, erin.key, { reading: true });
    streams.push(toldLater, leaving);
    await within(toldLater.ended, "the answer to come back later");
    leaving.close();
    live.close();
    stalled.close();
    await eventually(() => !users.has(erin.id), "the user's record to go");

    // A client that leaves while its source is looked up, or while its replay's first page is read, by
    // a FIN or a reset, leaves nothing behind either (one reset while the source was read had kept one
    // of its user's FOUNT_SSE_MAX_STREAMS for good).
    const getSource = store.getSource;
    const cases = [
      ["source", "reset"],
      ["source", "end"],
      ["page", "reset"],
      ["page", "end"],
    ] as const;
    for (const [pause, ending] of cases) {
      const what = `a client that left (${ending}) in the ${pause}'s read`;
      const paused = gate();
      const resumed = gate();
      const hold = async () => {
        paused.open();
        await resumed.opened;
      };
      store.getSource = async (id) => {
        if (pause === "source" && id === sourceId) await hold();
        return getSource.call(store, id);
      };
      store.listEvents = async (id, query) => {
        if (pause === "page" && id === sourceId) await hold();
        return list.call(store, id, query);
      };
      // The request's bookkeeping starts once the source is read: seen through `admit`.
      const admitted = gate();
      const admit = users.admit;
      users.admit = (...args) => {
        const stream = admit.apply(users, args);
        admitted.open();
        return stream;
      };
      // A reset closes the server's response at once (a FIN does not: half-open sockets stay open).
      const closed = gate();
      const seen = (req: IncomingMessage, res: ServerResponse) => {
        if (req.url?.startsWith(`/sources/${sourceId}/sse`)) res.once("close", closed.open);
      };
      server.built.app.server.on("request", seen);
      const gone = openStream(sourceId, erin.key, { reading: true });
      streams.push(gone);
      try {
        await within(paused.opened, `the ${pause}'s read`);
        if (ending === "reset") gone.reset();
        else gone.close();
        await gone.ended;
        if (ending === "reset") await within(closed.opened, "the server to see the reset");
        resumed.open();
        await within(admitted.opened, "the request to go on");
        await eventually(() => !users.has(erin.id), `nothing left of ${what}`);
        await eventually(() => hub.size() === 0, `the hub to forget ${what}`);
      } finally {
        server.built.app.server.off("request", seen);
        users.admit = admit;
        store.getSource = getSource;
      }
    }
  } finally {
    store.listEvents = list;
    for (const s of streams) s.close();
  }
});
