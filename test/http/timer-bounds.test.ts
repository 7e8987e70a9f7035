/**
 * Bounds on what one account's timers cost the scheduler: a source has at most 10 timer props (one
 * more is a 422 `props_invalid` at deploy), and once the owner's daily quota is used up its timers wait
 * (until the next UTC day, or 15 minutes) instead of being claimed and dropped at every tick. Fake clock.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { deploy, emitted, FakeClock, fixture, startClockServer } from "../fixtures/components/fixtures.ts";
import type { TestServer } from "../helpers.ts";
import { assertApiError } from "./openapi-walk.ts";

let server: TestServer;
const clock = new FakeClock("2026-05-10T08:00:00Z");

before(async () => {
  server = await startClockServer(clock, { env: { FOUNT_FREE_DAILY_INVOCATIONS: "2" } });
});
after(() => server.close());

function timers(n: number, timer: string): string {
  const props = Array.from(
    { length: n },
    (_, i) => `t${i}: { type: "$.interface.timer", default: ${timer} }`,
  );
  return `export default { name: "timers", version: "1", props: { ${props.join(", ")} }, async run() {} };`;
}

test("a source may have 10 timer props: 11 is a 422 props_invalid naming the 11th", async () => {
  const user = await server.createUser("timer-cap", "paid");
  const ten = await server.api("POST", "/v1/sources", {
    key: user.key,
    body: { component_code: timers(10, `{ cron: "* * * * * *" }`) },
  });
  assert.equal(ten.status, 200, ten.text);
  const eleven = await server.api("POST", "/v1/sources", {
    key: user.key,
    body: { component_code: timers(11, "{ intervalSeconds: 1 }") },
  });
  assertApiError(eleven, { status: 422, code: "props_invalid" });
  assert.equal(eleven.body.details.prop, "t10");
  assert.match(eleven.body.error, /at most 10 timer props/);
});

test("past the quota a source's timers wait instead of being claimed every tick, and resume", async () => {
  const user = await server.createUser("timer-wait");
  const s = await deploy(server, { component_code: fixture("ticker.mjs") }, user.key);
  const { scheduler, bus, committer } = server.built.services;
  const skipped: string[] = [];
  const off = bus.on("timer.fired", (f) => {
    if (f.sourceId === s.id && f.skipped === "quota") skipped.push(new Date(f.scheduledMs).toISOString());
  });
  try {
    // Two runs use the quota up; the third tick is skipped, and the next ten minutes claim nothing.
    for (let i = 0; i < 13; i++) {
      clock.advance(60);
      await scheduler.tick();
    }
    await committer.drain();
    assert.equal((await emitted(server, s.id, user.key)).length, 2);
    assert.deepEqual(skipped, ["2026-05-10T08:03:00.000Z"]);
    // Fifteen minutes on, the quota is checked again (still used up: one more skip, and a wait).
    clock.set("2026-05-10T08:18:30Z");
    await scheduler.tick();
    assert.deepEqual(skipped, ["2026-05-10T08:03:00.000Z", "2026-05-10T08:18:00.000Z"]);
    // A new UTC day: the quota is fresh and the timer runs on its grid.
    clock.set("2026-05-11T00:00:30Z");
    await scheduler.tick();
    await committer.drain();
    assert.equal((await emitted(server, s.id, user.key)).length, 3);
  } finally {
    off();
  }
});
