/**
 * What an SSE resume (Last-Event-ID) may hold in memory, with a real server: each page it reads holds
 * at most 4 MiB of events, the first one too, and one user's streams replay a few at a time
 * (FOUNT_SSE_MAX_REPLAYS); the others wait their turn, then replay everything.
 */
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, test } from "node:test";
import { keptPageBytes } from "../../src/domain/events/retention.ts";
import { defaultStreamHubOptions, type StreamHub } from "../../src/domain/events/stream-hub.ts";
import { streamHubOf } from "../../src/http/routes/stream.ts";
import { deployBigEvents } from "../fixtures/components/fixtures.ts";
import { adminKey, startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
let hub: StreamHub;

before(async () => {
  server = await startServer();
  hub = streamHubOf(server.built.services)!;
});
after(async () => {
  await server.close();
});

/** A raw stream from the first event on; `text()` is what arrived, read only when `reading`. */
function openStream(sourceId: string, reading: boolean) {
  const socket = net.connect(Number(new URL(server.url).port), "127.0.0.1");
  socket.on("error", () => {});
  socket.write(
    `GET /sources/${sourceId}/sse?last_event_id=1-0 HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${adminKey}\r\n\r\n`,
  );
  let text = "";
  const head = new Promise<string>((resolve) => {
    socket.once("data", (chunk) => {
      text += chunk.toString("latin1");
      // A client that stops reading: its replay stays in progress, its socket full.
      if (!reading) socket.pause();
      else socket.on("data", (more) => (text += more.toString("latin1")));
      resolve(text.split("\r\n")[0]!);
    });
  });
  return { head, text: () => text, close: () => socket.destroy() };
}

async function eventually(check: () => boolean, what: string, ms = 30_000): Promise<void> {
  const until = Date.now() + ms;
  while (!check()) {
    if (Date.now() > until) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

test("a resume reads its events at most 4 MiB at a time, its first page too", async () => {
  // 16 events of 700 KB: the first page of 16 events held 11 MiB.
  const sourceId = await deployBigEvents(server, 16, 700_000);
  const store = server.built.services.store;
  const list = store.listEvents;
  const pages: number[] = [];
  store.listEvents = async (id, query) => {
    const page = await list.call(store, id, query);
    if (id === sourceId) pages.push(page.items.reduce((n, e) => n + JSON.stringify(e.event).length, 0));
    return page;
  };
  const stream = openStream(sourceId, true);
  try {
    assert.match(await stream.head, / 200 /);
    await eventually(() => (stream.text().match(/^id: /gm) ?? []).length === 16, "every event");
  } finally {
    stream.close();
    store.listEvents = list;
  }
  assert.ok(pages.length > 1, `pages read: ${pages.length}`);
  assert.ok(
    pages.every((bytes) => bytes <= keptPageBytes),
    `every page read holds at most ${keptPageBytes} bytes of events: ${pages.join(", ")}`,
  );
});

test("a user's streams replay FOUNT_SSE_MAX_REPLAYS at a time; one over it waits its turn, then replays everything", async () => {
  // 12 events of 700 KB: more than the sockets' buffers take, so a client that reads nothing keeps its
  // replay going.
  const sourceId = await deployBigEvents(server, 12, 700_000);
  hub.configure({ maxReplaysPerUser: 1 });
  const streams: Array<ReturnType<typeof openStream>> = [];
  try {
    const stalled = openStream(sourceId, false);
    streams.push(stalled);
    assert.match(await stalled.head, / 200 /);
    const waiting = openStream(sourceId, true);
    streams.push(waiting);
    let answered = false;
    void waiting.head.then(() => {
      answered = true;
    });
    // A stream without Last-Event-ID does not replay, so it does not wait.
    const live = await fetch(`${server.url}/sources/${sourceId}/sse`, {
      headers: { authorization: `Bearer ${adminKey}` },
    });
    assert.equal(live.status, 200);
    await live.body?.cancel();
    // Nothing can show that a request waits rather than runs late: half a second of no answer, while
    // the stalled replay holds the turn, is the sign (a server that does not wait answers at once).
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(answered, false, "the second replay waits while the first holds the turn");
    stalled.close();
    assert.match(await waiting.head, / 200 /);
    await eventually(() => (waiting.text().match(/^id: /gm) ?? []).length === 12, "every event");
  } finally {
    for (const s of streams) s.close();
    hub.configure({ maxReplaysPerUser: defaultStreamHubOptions.maxReplaysPerUser });
  }
});
