/**
 * When a customResponse source's answer leaves: once the run's emits are committed (so an answered
 * request is a stored event), at once with `respond({ immediate: true })`, and never when the run
 * fails after responding. The run is held after respond() by a gate: a local HTTP server the test
 * answers when it chooses.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { deploy, emitted, events, fixture, type Hit, hit } from "../fixtures/components/fixtures.ts";
import { RunGates, waitMs, within } from "../fixtures/run-gates.ts";
import { startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
let endpoint: string;
let sourceId: string;
const gates = new RunGates();

before(async () => {
  await gates.start();
  // The run calls the test's gate on loopback.
  server = await startServer({}, { FOUNT_EXECUTOR_ALLOW_PRIVATE: "true" });
  const s = await deploy(server, { component_code: fixture("held-responder.mjs") });
  endpoint = s.configured_props.http.endpoint_url;
  sourceId = s.id;
});
after(async () => {
  await server.close();
  await gates.close();
});

async function emittedNs(): Promise<string[]> {
  return (await emitted(server, sourceId)).map((e: { n: string }) => e.n);
}

test("a customResponse answer is held until the run's emits are committed, and they are stored when it arrives", async (t) => {
  const before = await emittedNs();
  const g = gates.gate("held");
  t.after(g.release);
  let answered: Hit | undefined;
  const answer = hit(`${endpoint}?n=held&gate=${encodeURIComponent(g.url)}`).then((res) => {
    answered = res;
    return res;
  });
  // The run has responded and now waits at the gate: nothing of it is committed, so nothing is answered.
  await g.entered;
  await Promise.race([answer, new Promise((r) => setTimeout(r, 1500))]);
  assert.equal(answered, undefined, "the answer left while the run that gave it was still running");
  assert.deepEqual(await emittedNs(), before, "nothing is stored before the run ends");

  g.release();
  const res = await within(answer, "the held answer");
  assert.equal(res.status, 202);
  assert.equal(res.headers.get("x-n"), "held");
  assert.deepEqual(res.body, { n: "held" });
  // Read right after the answer: an acknowledged event is a stored event.
  assert.deepEqual(await emittedNs(), [...before, "held"]);
});

test("respond({ immediate: true }) answers at once, before the run is committed", async (t) => {
  const before = await emittedNs();
  const g = gates.gate("immediate");
  t.after(g.release);
  const answer = hit(`${endpoint}?n=immediate&immediate=true&gate=${encodeURIComponent(g.url)}`);
  await g.entered;
  // The gate stays shut until the answer is here, so it can only come from the running run.
  const res = await within(answer, "the immediate answer");
  assert.equal(res.status, 202);
  assert.deepEqual(res.body, { n: "immediate" });
  assert.deepEqual(await emittedNs(), before, "the run is still running, so its emit is not stored yet");

  g.release();
  const deadline = Date.now() + waitMs;
  while ((await emittedNs()).length === before.length) {
    assert.ok(Date.now() < deadline, "the run's emit was stored once it ended");
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.deepEqual(await emittedNs(), [...before, "immediate"]);
});

test("a run that throws after respond() answers with the error, not the held answer, and stores no emit", async () => {
  const before = await emittedNs();
  const res = await hit(`${endpoint}?n=thrown&after=throw`);
  assert.equal(res.status, 500);
  assert.equal(res.body.code, "component_error");
  assert.notDeepEqual(res.body, { n: "thrown" });
  assert.deepEqual(await emittedNs(), before, "the failed run's emit was discarded");
  const [error] = await events(server, sourceId, "$errors");
  assert.match(error.event.error.message, /failed after responding/);
  assert.equal(error.event.original_event.query.n, "thrown");
});

test("respond() refuses an immediate that is not true or false, and the run fails", async () => {
  const before = await emittedNs();
  const res = await hit(`${endpoint}?n=odd&immediate=yes`);
  assert.equal(res.status, 500);
  assert.deepEqual(await emittedNs(), before);
  const [error] = await events(server, sourceId, "$errors");
  assert.match(error.event.error.message, /immediate must be true or false/);
});

test("an answer with a header that cannot be sent is answered 500 component_error at once, and the run's events are kept", async () => {
  const s = await deploy(server, { component_code: fixture("answer-as-told.mjs") });
  const bad: Array<Record<string, unknown>> = [
    { "x-a": "a\nb" },
    { "bad name": "1" },
    { "x-b": "\u0100" },
    { "x-c": ["a", "b\r"] },
    { "x-d": "a\u0000b" },
    { "set-cookie": "a=1\nb" },
  ];
  for (const headers of bad) {
    const res = await hit(s.endpoint_url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ headers, body: "hi" }),
      // Before, Node refused the head as it wrote it, and the request was never answered.
      signal: AbortSignal.timeout(20_000),
    });
    assert.equal(res.status, 500, JSON.stringify(headers));
    assert.equal((res.body as any).code, "component_error");
    assert.equal((res.body as any).details.reason, "invalid_answer_header");
  }
  assert.equal((await events(server, s.id)).length, bad.length, "each run's event is stored");
  const fine = await hit(s.endpoint_url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ headers: { "x-fine": "ok" }, body: "hi" }),
  });
  assert.equal(fine.status, 200);
  assert.equal(fine.headers.get("x-fine"), "ok");
});
