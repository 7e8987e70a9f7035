/**
 * The stream hub's batching, on a fake sink: the events stored in one turn reach each client in one
 * write, in order, shared between clients; a client that opens before the turn ends holds them until
 * it is live; a deleted source's streams get its last events before they end.
 */
import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import { test } from "node:test";
import { Bus } from "../../../src/domain/bus.ts";
import { StreamHub, type StreamSink } from "../../../src/domain/events/stream-hub.ts";
import type { EventRecord } from "../../../src/domain/types.ts";

class FakeSink extends EventEmitter implements StreamSink {
  writes: Array<Buffer | string> = [];
  destroyed = false;
  writableEnded = false;
  write(chunk: Buffer | string): boolean {
    this.writes.push(chunk);
    return true;
  }
  end(): void {
    this.writableEnded = true;
  }
  destroy(): void {
    this.destroyed = true;
  }
  cork(): void {}
  uncork(): void {}
  /** Every write after the opening comment, as text. */
  frames(): string[] {
    return this.writes.slice(1).map(String);
  }
}

let ms = 1_700_000_000_000;
function event(n: number, emitterId = "dc_a"): EventRecord {
  ms += 1;
  return {
    emitterId,
    channel: "",
    id: `${ms}-0`,
    idMs: ms,
    idSeq: 0,
    indexedAtMs: ms,
    event: { n },
    meta: {} as EventRecord["meta"],
  };
}

const format = (e: EventRecord) => `id: ${e.id}\ndata: ${JSON.stringify(e.event)}\n\n`;
const tick = () => new Promise<void>((resolve) => process.nextTick(resolve));

test("the events of one turn go to each client in one write of shared bytes, in order", async () => {
  const bus = new Bus();
  const hub = new StreamHub(bus, format);
  const sinks = [new FakeSink(), new FakeSink()];
  for (const sink of sinks) await hub.open("dc_a", "", sink).start([]);
  const events = [event(1), event(2), event(3)];
  for (const e of events) bus.emit("event.stored", e);
  assert.deepEqual(sinks[0]!.frames(), [], "nothing is written before the turn ends");
  await tick();
  const expected = events.map(format).join("");
  for (const sink of sinks) assert.deepEqual(sink.frames(), [expected]);
  assert.equal(sinks[0]!.writes[1], sinks[1]!.writes[1], "one buffer for every client");
  assert.equal(hub.stats().frames, 6);
  bus.emit("event.stored", event(4, "dc_other"));
  await tick();
  assert.equal(sinks[0]!.writes.length, 2, "another emitter's event is not sent");
  hub.close();
});

test("a client that opens before the turn ends gets the turn's events once it is live", async () => {
  const bus = new Bus();
  const hub = new StreamHub(bus, format);
  const early = new FakeSink();
  await hub.open("dc_a", "", early).start([]);
  const first = event(1);
  bus.emit("event.stored", first);
  const late = new FakeSink();
  const client = hub.open("dc_a", "", late, { ms: first.idMs - 1, seq: 0 });
  await tick();
  assert.deepEqual(late.writes, [], "held while replaying");
  // The replay read the store after the commit: the event is sent once, from the replay.
  await client.start([first]);
  assert.deepEqual(late.frames(), [format(first)]);
  assert.deepEqual(early.frames(), [format(first)]);
  hub.close();
});

test("a deleted source's streams get the events stored before the deletion, then end", async () => {
  const bus = new Bus();
  const hub = new StreamHub(bus, format);
  const sink = new FakeSink();
  await hub.open("dc_a", "", sink).start([]);
  const last = event(1);
  bus.emit("event.stored", last);
  bus.emit("source.deleted", { sourceId: "dc_a" });
  assert.deepEqual(sink.frames(), [format(last)]);
  assert.equal(sink.writableEnded, true);
  assert.equal(hub.size(), 0);
  hub.close();
});

test("a replaying client whose socket takes nothing for replayStallMs is dropped, and one that drains goes on", async () => {
  const hub = new StreamHub(new Bus(), format, { replayStallMs: 50 });
  // Each sink's buffer is full from its first event on: a write answers false until 'drain'.
  class FullSink extends FakeSink {
    override write(chunk: Buffer | string): boolean {
      super.write(chunk);
      return this.writes.length < 2;
    }
  }
  const stuck = new FullSink();
  const reading = new FullSink();
  const stored = [event(1), event(2), event(3)];
  const stuckDone = hub.open("dc_a", "", stuck).start(stored);
  const readingDone = hub.open("dc_a", "", reading).start(stored);
  // The reading client's socket drains every 10 ms, the other's never.
  const drains = setInterval(() => reading.emit("drain"), 10);
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      Promise.all([stuckDone, readingDone]),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error("a replay waited for its socket for ever")), 10_000);
      }),
    ]);
  } finally {
    clearInterval(drains);
    clearTimeout(timer);
  }
  assert.equal(stuck.destroyed, true, "the stuck client is dropped");
  assert.equal(stuck.frames().length, 1, "after its first event");
  assert.equal(reading.destroyed, false);
  assert.equal(reading.frames().length, 3);
  assert.equal(hub.size(), 1);
});
