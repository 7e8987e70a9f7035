/**
 * A destination's failures in the log, on a fake clock: one line when it starts failing, one when it
 * recovers, a reminder at most hourly in between, a flapping destination held to two lines per quiet
 * period, decisions made without an attempt left out, and one not attempted for a day forgotten.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import type { FastifyBaseLogger } from "fastify";
import { DestinationHealth, inWords } from "../../src/delivery/destination-health.ts";
import { Bus, type EventMap } from "../../src/domain/bus.ts";

type Settled = EventMap["delivery.settled"][0];

function setUp() {
  let now = Date.parse("2030-01-01T00:00:00Z");
  const lines: Array<{ level: string; obj: any; msg: string }> = [];
  const log =
    (level: string) =>
    (obj: unknown, msg: string): void => {
      lines.push({ level, obj, msg });
    };
  const logger = {
    info: log("info"),
    warn: log("warn"),
    debug: log("debug"),
  } as unknown as FastifyBaseLogger;
  const bus = new Bus();
  const changes: Array<EventMap["destination.changed"][0]> = [];
  bus.on("destination.changed", (c) => changes.push(c));
  const health = new DestinationHealth({ bus, logger, clock: { now: () => now } });
  health.listen();
  let n = 0;
  const settle = (listenerId: string, outcome: Settled["outcome"], extra: Partial<Settled> = {}) =>
    bus.emit("delivery.settled", {
      deliveryId: `del_${++n}`,
      subscriptionId: "sub_1",
      emitterId: "dc_1",
      eventId: `1-${n}`,
      listenerId,
      kind: "webhook",
      status: outcome === "retry" ? "pending" : outcome,
      outcome,
      statusCode: outcome === "succeeded" ? 200 : 503,
      error: outcome === "succeeded" ? null : "HTTP 503",
      durationMs: 12,
      latencyMs: 20,
      ...extra,
    });
  return {
    lines,
    changes,
    health,
    settle,
    advance: (ms: number) => {
      now += ms;
    },
  };
}

const minute = 60_000;
const hour = 60 * minute;

test("twenty failed attempts write one line; the success after them writes one more, with the tally", () => {
  const { lines, changes, health, settle, advance } = setUp();
  for (let i = 0; i < 20; i++) {
    settle("wh_a", i % 5 === 4 ? "failed" : "retry");
    advance(30_000);
  }
  assert.equal(lines.length, 1);
  assert.equal(lines[0]!.level, "warn");
  assert.equal(
    lines[0]!.msg,
    "webhook wh_a is failing: HTTP 503 (one line when it recovers, a reminder each hour until then)",
  );
  assert.equal(lines[0]!.obj.deliveryId, "del_1");
  assert.equal(health.failing, 1);
  settle("wh_a", "succeeded");
  assert.equal(lines.length, 2);
  assert.equal(lines[1]!.level, "info");
  assert.equal(
    lines[1]!.msg,
    "webhook wh_a recovered after 10 min: 20 failed attempts, 4 deliveries given up",
  );
  assert.equal(lines[1]!.obj.failedAttempts, 20);
  assert.equal(health.failing, 0);
  assert.deepEqual(
    changes.map((c) => [c.state, c.failing]),
    [
      ["failing", 1],
      ["recovered", 0],
    ],
  );
  // Healthy since: more successes say nothing.
  settle("wh_a", "succeeded");
  assert.equal(lines.length, 2);
});

test("a destination that keeps failing gets a reminder at most once an hour", () => {
  const { lines, settle, advance } = setUp();
  // An attempt every 10 minutes for 2 h 30 min.
  for (let t = 0; t <= 150; t += 10) {
    settle("wh_b", "retry", { error: t === 150 ? "HTTP 502" : "HTTP 503" });
    advance(10 * minute);
  }
  assert.deepEqual(
    lines.map((l) => l.msg),
    [
      "webhook wh_b is failing: HTTP 503 (one line when it recovers, a reminder each hour until then)",
      "webhook wh_b is still failing after 1 h: 7 failed attempts, 0 deliveries given up; last error: HTTP 503",
      "webhook wh_b is still failing after 2 h: 13 failed attempts, 0 deliveries given up; last error: HTTP 503",
    ],
  );
  settle("wh_b", "succeeded");
  assert.equal(
    lines.at(-1)!.msg,
    "webhook wh_b recovered after 2 h 40 min: 16 failed attempts, 0 deliveries given up",
  );
});

test("a flapping destination writes two lines per quiet period, its brief failures told in the next", () => {
  const { lines, changes, settle, advance } = setUp();
  settle("wh_c", "retry");
  advance(minute);
  settle("wh_c", "succeeded");
  assert.equal(lines.length, 2);
  // Fails and recovers again twice within 5 minutes of the recovery line: held back.
  for (let i = 0; i < 2; i++) {
    advance(minute);
    settle("wh_c", "retry");
    advance(10_000);
    settle("wh_c", "succeeded");
  }
  assert.equal(lines.length, 2);
  // Past the quiet period, a failure is told, with the brief ones before it.
  advance(5 * minute);
  settle("wh_c", "retry", { error: "HTTP 500" });
  assert.equal(lines.length, 3);
  assert.match(
    lines[2]!.msg,
    /^webhook wh_c is failing: HTTP 500; it also failed 2 times briefly since it recovered 7 min ago/,
  );
  // Every change of state is counted all the same.
  assert.deepEqual(
    changes.map((c) => c.state),
    ["failing", "recovered", "failing", "recovered", "failing", "recovered", "failing"],
  );
});

test("decisions made without an attempt (a deleted webhook) are not failures of the destination", () => {
  const { lines, health, settle } = setUp();
  settle("wh_d", "failed", { durationMs: null, error: "the webhook no longer exists" });
  assert.equal(lines.length, 0);
  assert.equal(health.failing, 0);
});

test("destinations are apart, and one without an attempt for a day is forgotten with a line", () => {
  const { lines, changes, health, settle, advance } = setUp();
  settle("wh_e", "retry");
  settle("wh_f", "retry");
  assert.equal(health.failing, 2);
  assert.equal(lines.length, 2);
  advance(hour);
  settle("wh_f", "succeeded");
  advance(25 * hour);
  // Seen at the next attempt anywhere.
  settle("wh_g", "succeeded");
  assert.equal(health.failing, 0);
  assert.equal(changes.at(-1)!.state, "forgotten");
  assert.equal(changes.at(-1)!.failing, 0);
  assert.equal(
    lines.at(-1)!.msg,
    "webhook wh_e had no delivery attempt for 26 h (deleted, inactive, or no events for it): no longer followed",
  );
});

test("durations read as words", () => {
  assert.equal(inWords(4_400), "4 s");
  assert.equal(inWords(12 * minute + 5_000), "12 min");
  assert.equal(inWords(3 * hour + 5 * minute), "3 h 5 min");
  assert.equal(inWords(50 * hour), "2 d 2 h");
});
