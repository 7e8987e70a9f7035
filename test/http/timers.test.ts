/**
 * Timer sources: intervals and 5- or 6-field cron (with a timezone) fire at the right times, each tick
 * once, a tick missed while down once; the schedule and the db survive a restart. Driven by a fake
 * clock and `scheduler.tick()`, except the real-time tests of the running scheduler: a slow run of one
 * source (another tenant's too) delays no other timer, also after a restart, and a tick that comes while
 * its source's run still runs is skipped with a `$logs` note.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import type { RunOutcome } from "../../src/domain/sources/runner.ts";
import type { EventRecord } from "../../src/domain/types.ts";
import {
  deploy,
  emitted,
  events,
  FakeClock,
  fixture,
  nextBusEvent,
  startClockServer,
} from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

const open: TestServer[] = [];
after(async () => {
  for (const s of open) await s.close();
});

async function clockServer(clock: FakeClock): Promise<TestServer> {
  const s = await startClockServer(clock);
  open.push(s);
  return s;
}

/** One scheduler pass; resolves with the runs it made, once committed. */
async function tick(server: TestServer): Promise<RunOutcome[]> {
  return server.built.services.scheduler.tick();
}

const seconds = (iso: string) => Date.parse(iso) / 1000;

test("an interval timer fires one interval after deploy, then every interval, each tick once", async () => {
  const clock = new FakeClock("2026-03-01T10:00:00Z");
  const server = await clockServer(clock);
  const s = await deploy(server, { component_code: fixture("ticker.mjs") });
  assert.deepEqual(s.configured_props.timer, { cron: null, interval_seconds: 60 });

  clock.advance(59);
  assert.equal((await tick(server)).length, 0, "not yet");
  clock.advance(1);
  assert.equal((await tick(server)).length, 1);
  assert.equal((await tick(server)).length, 0, "the same tick never fires twice");
  clock.advance(59);
  assert.equal((await tick(server)).length, 0);
  clock.advance(1);
  // Two passes at once (as two nodes would race): still one run.
  const [a, b] = await Promise.all([tick(server), tick(server)]);
  assert.equal(a.length + b.length, 1);

  const ticks = await emitted(server, s.id);
  assert.deepEqual(
    ticks.map((t) => t.event),
    [
      { timestamp: seconds("2026-03-01T10:01:00Z"), interval_seconds: 60 },
      { timestamp: seconds("2026-03-01T10:02:00Z"), interval_seconds: 60 },
    ],
  );
  assert.deepEqual(
    ticks.map((t) => t.ticks),
    [1, 2],
  );
});

test("ticks missed while the server was down fire once, and the schedule keeps its grid", async () => {
  const clock = new FakeClock("2026-03-01T10:00:00Z");
  const server = await clockServer(clock);
  const s = await deploy(server, {
    component_code: fixture("ticker.mjs"),
    configured_props: { timer: { intervalSeconds: 60 } },
  });
  clock.advance(60 * 10 + 30); // ten periods and a half: ticks at 10:01 … 10:10 were missed
  assert.equal((await tick(server)).length, 1);
  assert.equal((await tick(server)).length, 0);
  clock.set("2026-03-01T10:10:59Z");
  assert.equal((await tick(server)).length, 0);
  clock.set("2026-03-01T10:11:00Z");
  assert.equal((await tick(server)).length, 1);
  const ticks = await emitted(server, s.id);
  assert.equal(ticks.length, 2);
  assert.equal(ticks[1].event.timestamp, seconds("2026-03-01T10:11:00Z"));
});

test("a 5-field cron fires at its times in its timezone", async () => {
  // 07:00 in New York (EST, UTC-5).
  const clock = new FakeClock("2026-01-15T12:00:00Z");
  const server = await clockServer(clock);
  const s = await deploy(server, {
    component_code: fixture("ticker.mjs"),
    configured_props: { timer: { cron: "0 9 * * *", timezone: "America/New_York" } },
  });
  assert.deepEqual(s.configured_props.timer, {
    cron: "0 9 * * *",
    interval_seconds: null,
    timezone: "America/New_York",
  });
  clock.set("2026-01-15T13:59:59Z");
  assert.equal((await tick(server)).length, 0);
  clock.set("2026-01-15T14:00:00Z"); // 09:00 in New York
  assert.equal((await tick(server)).length, 1);
  clock.set("2026-01-16T13:59:00Z");
  assert.equal((await tick(server)).length, 0);
  clock.set("2026-01-16T14:00:00Z");
  assert.equal((await tick(server)).length, 1);
  const ticks = await emitted(server, s.id);
  assert.deepEqual(ticks[0].event, {
    timestamp: seconds("2026-01-15T14:00:00Z"),
    cron: "0 9 * * *",
    timezone: "America/New_York",
  });
  assert.equal(ticks[1].event.timestamp, seconds("2026-01-16T14:00:00Z"));
});

test("a cron follows daylight saving time of its timezone", async () => {
  // Paris moves from UTC+1 to UTC+2 on 2026-03-29.
  const clock = new FakeClock("2026-03-28T00:00:00Z");
  const server = await clockServer(clock);
  const s = await deploy(server, {
    component_code: fixture("ticker.mjs"),
    configured_props: { timer: { cron: "0 30 8 * * *", timezone: "Europe/Paris" } },
  });
  clock.set("2026-03-28T07:30:00Z"); // 08:30 CET
  assert.equal((await tick(server)).length, 1);
  clock.set("2026-03-29T06:29:59Z");
  assert.equal((await tick(server)).length, 0);
  clock.set("2026-03-29T06:30:00Z");
  assert.equal((await tick(server)).length, 1, "08:30 CEST is 06:30 UTC");
  assert.deepEqual(
    (await emitted(server, s.id)).map((t) => t.event.timestamp),
    [seconds("2026-03-28T07:30:00Z"), seconds("2026-03-29T06:30:00Z")],
  );
});

test("a 6-field cron has a seconds field", async () => {
  const clock = new FakeClock("2026-05-05T05:05:05Z");
  const server = await clockServer(clock);
  const s = await deploy(server, {
    component_code: fixture("ticker.mjs"),
    configured_props: { timer: { cron: "*/20 * * * * *" } },
  });
  clock.set("2026-05-05T05:05:19Z");
  assert.equal((await tick(server)).length, 0);
  clock.set("2026-05-05T05:05:20Z");
  assert.equal((await tick(server)).length, 1);
  clock.set("2026-05-05T05:05:40Z");
  assert.equal((await tick(server)).length, 1);
  assert.deepEqual(
    (await emitted(server, s.id)).map((t) => t.event),
    [
      { timestamp: seconds("2026-05-05T05:05:20Z"), cron: "*/20 * * * * *", timezone: "UTC" },
      { timestamp: seconds("2026-05-05T05:05:40Z"), cron: "*/20 * * * * *", timezone: "UTC" },
    ],
  );
});

test("a timer source without run emits its timer event; the code's default schedule applies", async () => {
  const clock = new FakeClock("2026-07-01T08:00:00Z");
  const server = await clockServer(clock);
  const s = await deploy(server, { component_code: fixture("schedule.mjs") });
  assert.deepEqual(s.configured_props.timer, { cron: "0 9 * * *", interval_seconds: null });
  clock.set("2026-07-01T09:00:00Z");
  assert.equal((await tick(server)).length, 1);
  assert.deepEqual(await emitted(server, s.id), [
    { timestamp: seconds("2026-07-01T09:00:00Z"), cron: "0 9 * * *", timezone: "UTC" },
  ]);
});

test("an inactive timer source does not fire; reactivated, it fires again", async () => {
  const clock = new FakeClock("2026-03-01T10:00:00Z");
  const server = await clockServer(clock);
  const s = await deploy(server, { component_code: fixture("ticker.mjs") });
  assert.equal((await server.api("PUT", `/v1/sources/${s.id}`, { body: { active: false } })).status, 200);
  for (let i = 0; i < 5; i++) {
    clock.advance(60);
    assert.equal((await tick(server)).length, 0);
  }
  assert.equal((await server.api("PUT", `/v1/sources/${s.id}`, { body: { active: true } })).status, 200);
  clock.advance(60);
  assert.equal((await tick(server)).length, 1);
  assert.equal((await emitted(server, s.id)).length, 1);
});

test("an update of the timer prop moves the schedule", async () => {
  const clock = new FakeClock("2026-03-01T10:00:00Z");
  const server = await clockServer(clock);
  const s = await deploy(server, { component_code: fixture("ticker.mjs") });
  const put = await server.api("PUT", `/v1/sources/${s.id}`, {
    body: { configured_props: { timer: { intervalSeconds: 3600 } } },
  });
  assert.equal(put.status, 200, put.text);
  assert.deepEqual(put.body.data.configured_props.timer, { cron: null, interval_seconds: 3600 });
  clock.advance(60 * 59);
  assert.equal((await tick(server)).length, 0);
  clock.advance(60);
  assert.equal((await tick(server)).length, 1);
  assert.equal((await emitted(server, s.id))[0].event.interval_seconds, 3600);
});

test("renaming a timer source keeps its schedule", async () => {
  const clock = new FakeClock("2026-03-01T10:00:00Z");
  const server = await clockServer(clock);
  const s = await deploy(server, { component_code: fixture("ticker.mjs") });
  // A UI saving the name every 45 s must not push the 60 s tick further away each time.
  for (const name of ["renamed", "renamed again"]) {
    clock.advance(45);
    const put = await server.api("PUT", `/v1/sources/${s.id}`, { body: { name } });
    assert.equal(put.status, 200, put.text);
    assert.equal((await tick(server)).length, name === "renamed" ? 0 : 1);
  }
  assert.equal((await emitted(server, s.id))[0].event.timestamp, seconds("2026-03-01T10:01:00Z"));
});

test("the schedule and the db survive a restart on the same data folder", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-timers-restart-"));
  try {
    const clock = new FakeClock("2026-03-01T10:00:00Z");
    let s: any;
    const first = await startClockServer(clock, { dataDir });
    try {
      s = await deploy(first, { component_code: fixture("ticker.mjs") });
      clock.advance(60);
      assert.equal((await tick(first)).length, 1);
    } finally {
      await first.close();
    }
    // Down from 10:01 to 10:01:30; back before the 10:02 tick.
    clock.advance(30);
    const second = await startClockServer(clock, { dataDir });
    try {
      assert.equal((await tick(second)).length, 0);
      clock.advance(30);
      assert.equal((await tick(second)).length, 1);
      const ticks = await emitted(second, s.id);
      assert.deepEqual(
        ticks.map((t) => [t.ticks, t.event.timestamp]),
        [
          [1, seconds("2026-03-01T10:01:00Z")],
          [2, seconds("2026-03-01T10:02:00Z")],
        ],
      );
    } finally {
      await second.close();
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test("the real scheduler fires an intervalSeconds: 1 source within seconds (real time)", async () => {
  const server = await startServer();
  open.push(server);
  const { bus } = server.built.services;
  const s = await deploy(server, {
    component_code: fixture("ticker.mjs"),
    configured_props: { timer: { intervalSeconds: 1 } },
  });
  const stored = await nextBusEvent<EventRecord>(
    (listener) => bus.on("event.stored", listener),
    (e) => e.emitterId === s.id && e.channel === "",
    10_000,
  );
  const event = stored.event as { ticks: number; event: { interval_seconds: number; timestamp: number } };
  assert.equal(event.ticks, 1);
  assert.equal(event.event.interval_seconds, 1);
  assert.ok(Math.abs(event.event.timestamp - Date.now() / 1000) < 10);
  assert.equal((await events(server, s.id, "$errors")).length, 0);
});

/** Resolves when a run of `sourceId` started on a tick (not a skipped one). */
function firstRunStarted(server: TestServer, sourceId: string, timeoutMs = 60_000): Promise<unknown> {
  return nextBusEvent<{ sourceId: string; skipped?: string }>(
    (listener) => server.built.services.bus.on("timer.fired", listener),
    (f) => f.sourceId === sourceId && !f.skipped,
    timeoutMs,
  );
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// How long the slow run takes. The other 1 s timer is counted while it runs (from its tick to its commit):
// it gets about 10 ticks then, or fewer while its executor process starts; 3 leaves room for a loaded
// machine, and a scheduler that waits for the slow run gets 1 at most (a run of the same pass).
const slowRunMs = 10_000;
const minTicks = 3;

/** Default-channel events stored by sources other than `slowId` from its next run's tick to its commit. */
async function ticksDuringSlowRun(server: TestServer, slowId: string): Promise<number> {
  const { bus } = server.built.services;
  await firstRunStarted(server, slowId);
  let n = 0;
  const off = bus.on("event.stored", (e) => {
    if (e.emitterId !== slowId && e.channel === "") n++;
  });
  try {
    await nextBusEvent<EventRecord>(
      (listener) => bus.on("event.stored", listener),
      (e) => e.emitterId === slowId && e.channel === "",
      120_000,
    );
  } finally {
    off();
  }
  return n;
}

test("another tenant's slow timer does not delay a timer (real time)", async () => {
  const server = await startServer();
  open.push(server);
  const slowpoke = await server.createUser("slowpoke", "paid");
  const ticker = await deploy(server, {
    component_code: fixture("ticker.mjs"),
    configured_props: { timer: { intervalSeconds: 1 } },
  });
  const slow = await deploy(
    server,
    { component_code: fixture("slow-timer.mjs"), configured_props: { ms: slowRunMs } },
    slowpoke.key,
  );
  const ticks = await ticksDuringSlowRun(server, slow.id);
  assert.ok(ticks >= minTicks, `${ticks} ticks while another tenant's run took ${slowRunMs} ms`);
  assert.equal((await events(server, ticker.id, "$errors")).length, 0);
});

test("a tick that comes while its source's previous run still runs is skipped, with a $logs note (real time)", async () => {
  const server = await startServer();
  open.push(server);
  const runMs = 2_500;
  const s = await deploy(server, {
    component_code: fixture("slow-timer.mjs"),
    configured_props: { ms: runMs },
  });
  const fired: Array<{ scheduledMs: number; skipped?: string }> = [];
  const off = server.built.services.bus.on("timer.fired", (f) => {
    if (f.sourceId === s.id) fired.push(f);
  });
  await firstRunStarted(server, s.id);
  await sleep(8_000);
  // No more ticks, and the run in flight commits, so every started run is counted.
  await server.built.services.scheduler.stop();
  off();

  const runs = fired.filter((f) => !f.skipped);
  const skipped = fired.filter((f) => f.skipped);
  assert.ok(runs.length >= 2, `${runs.length} runs`);
  assert.ok(skipped.length >= 2, `${skipped.length} skipped ticks`);
  assert.ok(
    skipped.every((f) => f.skipped === "running"),
    JSON.stringify(skipped),
  );
  // Never a run while the previous one runs: a run takes 2.5 s, so started runs are at least 3 ticks apart.
  for (let i = 1; i < runs.length; i++) {
    assert.ok(runs[i].scheduledMs - runs[i - 1].scheduledMs >= 3_000, JSON.stringify(runs));
  }
  // Every skipped tick is on $logs, naming the tick it skipped.
  const notes = (await events(server, s.id, "$logs")).map((e) => e.event.message as string);
  for (const f of skipped) {
    const iso = new Date(f.scheduledMs).toISOString();
    assert.ok(
      notes.some((m) => m.startsWith(`Timer tick of ${iso} skipped`) && m.includes("is still running")),
      `no $logs note for ${iso}: ${JSON.stringify(notes)}`,
    );
  }
  // Each run saw its own tick: no tick's event is handed to a run late.
  const emits = await emitted(server, s.id);
  assert.deepEqual(
    emits.map((e) => e.timestamp),
    runs.map((f) => Math.floor(f.scheduledMs / 1000)),
  );
});

test("after a restart, timers resume without waiting for a slow run (real time)", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-timers-resume-"));
  try {
    // Deployed on a server whose scheduler is off, so both ticks are due when the next server starts.
    const first = await startClockServer(new FakeClock(new Date().toISOString()), { dataDir });
    let slow: any;
    let ticker: any;
    try {
      const slowpoke = await first.createUser("slowpoke", "paid");
      slow = await deploy(
        first,
        { component_code: fixture("slow-timer.mjs"), configured_props: { ms: slowRunMs } },
        slowpoke.key,
      );
      ticker = await deploy(first, {
        component_code: fixture("ticker.mjs"),
        configured_props: { timer: { intervalSeconds: 1 } },
      });
    } finally {
      await first.close();
    }
    await sleep(1_500);
    const second = await startServer({ dataDir });
    try {
      const ticks = await ticksDuringSlowRun(second, slow.id);
      assert.ok(ticks >= minTicks, `${ticks} ticks after a restart while a slow run took ${slowRunMs} ms`);
      assert.ok((await emitted(second, ticker.id)).length >= minTicks);
    } finally {
      await second.close();
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test("on a fake clock: a tick during its source's run is skipped with a $logs note, and the next tick runs", async () => {
  const clock = new FakeClock("2026-03-01T10:00:00Z");
  const server = await clockServer(clock);
  // Longer than the two passes the test makes while it runs, on any machine.
  const s = await deploy(server, {
    component_code: fixture("slow-timer.mjs"),
    configured_props: { ms: 4_000 },
  });
  clock.set("2026-03-01T10:00:01Z");
  const started = firstRunStarted(server, s.id);
  const first = tick(server);
  await started;
  clock.set("2026-03-01T10:00:02Z");
  assert.equal((await tick(server)).length, 0, "the tick of 10:00:02 comes while the run of 10:00:01 runs");
  assert.equal((await first).length, 1);
  clock.set("2026-03-01T10:00:03Z");
  assert.equal((await tick(server)).length, 1, "the run ended: the next tick runs");
  assert.deepEqual(
    (await emitted(server, s.id)).map((e) => e.timestamp),
    [seconds("2026-03-01T10:00:01Z"), seconds("2026-03-01T10:00:03Z")],
  );
  const logs = await events(server, s.id, "$logs");
  assert.deepEqual(
    logs.map((e) => e.event),
    [
      {
        level: "warn",
        message:
          "Timer tick of 2026-03-01T10:00:02.000Z skipped: the run of the tick of 2026-03-01T10:00:01.000Z " +
          "(started 2026-03-01T10:00:01.000Z) is still running",
        ts: Date.parse("2026-03-01T10:00:02Z"),
      },
    ],
  );
});
