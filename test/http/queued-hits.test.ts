/**
 * Hits waiting for their source's run are bounded and belong to their client: past
 * FOUNT_MAX_QUEUED_HITS hits (or FOUNT_MAX_QUEUED_HIT_BYTES of bodies) a source's further hits get 429
 * `rate_limited` with Retry-After at once, and a hit whose client went away before its run started is
 * dropped, never run. A gate (a local HTTP server the run fetches, answered when the test chooses)
 * holds the source's first run, so the others wait behind it for as long as the test needs.
 */
import assert from "node:assert/strict";
import http from "node:http";
import { after, before, test } from "node:test";
import { deploy, emitted, fixture, type Hit, hit } from "../fixtures/components/fixtures.ts";
import { RunGates, within } from "../fixtures/run-gates.ts";
import { startServer, type TestServer } from "../helpers.ts";

const maxHits = 3;
const maxBytes = 1000;

let server: TestServer;
const gates = new RunGates();

before(async () => {
  await gates.start();
  // The run calls the test's gate on loopback.
  server = await startServer(
    { maxQueuedHits: maxHits, maxQueuedHitBytes: maxBytes },
    { FOUNT_EXECUTOR_ALLOW_PRIVATE: "true" },
  );
});
after(async () => {
  await server.close();
  await gates.close();
});

/** A source whose hits emit their `n` and answer 202 once stored; `?gate=` holds a run. */
async function heldSource(): Promise<{ id: string; endpoint: string }> {
  const s = await deploy(server, { component_code: fixture("held-responder.mjs") });
  return { id: s.id, endpoint: s.configured_props.http.endpoint_url };
}

async function emittedNs(sourceId: string): Promise<string[]> {
  return (await emitted(server, sourceId)).map((e: { n: string }) => e.n).sort();
}

/** Sends hits at once; resolves with the answers that come first, `count` of them, as the others wait. */
async function firstAnswers(pending: Array<Promise<Hit>>, count: number): Promise<Hit[]> {
  const got: Hit[] = [];
  await within(
    new Promise<void>((resolve) => {
      for (const p of pending)
        void p.then((res) => {
          got.push(res);
          if (got.length === count) resolve();
        });
    }),
    `${count} answers`,
  );
  return got;
}

function assertRefused(res: Hit): void {
  assert.equal(res.status, 429, res.text);
  assert.equal(res.body.code, "rate_limited");
  assert.match(res.body.error, /waiting for their run/);
  assert.equal(res.headers.get("retry-after"), "1");
}

test("hits past a source's bound of waiting hits get 429 rate_limited with Retry-After at once, the others run", async () => {
  const { id, endpoint } = await heldSource();
  const g = gates.gate("count");
  const first = hit(`${endpoint}?n=first&gate=${encodeURIComponent(g.url)}`);
  await g.entered;
  // The first run holds its place; of four more, two fit beside it and two are refused.
  const rest = ["b", "c", "d", "e"].map((n) => hit(`${endpoint}?n=${n}`, { method: "POST", body: "{}" }));
  const refused = await firstAnswers(rest, 2);
  for (const res of refused) assertRefused(res);

  g.release();
  assert.equal((await within(first, "the held hit")).status, 202);
  const answers = await within(Promise.all(rest), "every hit");
  assert.deepEqual(answers.map((r) => r.status).sort(), [202, 202, 429, 429]);
  // The places are given back once the runs ended.
  assert.equal((await hit(`${endpoint}?n=after`)).status, 202);
  const stored = await emittedNs(id);
  assert.equal(stored.length, 4, `stored ${stored}`);
});

test("hits past a source's bound of waiting body bytes are refused with 429", async () => {
  const { endpoint } = await heldSource();
  const g = gates.gate("bytes");
  const first = hit(`${endpoint}?n=first&gate=${encodeURIComponent(g.url)}`);
  await g.entered;
  // Two bodies of 600 bytes do not fit in 1,000 together: one waits, the other is refused.
  const body = JSON.stringify({ pad: "x".repeat(590) });
  assert.ok(body.length > maxBytes / 2 && body.length < maxBytes);
  const rest = ["b", "c"].map((n) => hit(`${endpoint}?n=${n}`, { method: "POST", body }));
  const [refused] = await firstAnswers(rest, 1);
  assertRefused(refused!);
  g.release();
  await within(first, "the held hit");
  assert.deepEqual((await within(Promise.all(rest), "both hits")).map((r) => r.status).sort(), [202, 429]);
});

test("a waiting hit whose client went away before its run started is dropped, never run", async () => {
  const { id, endpoint } = await heldSource();
  const { executor } = server.built.services;
  // Tells the test when a hit has reached the executor's queue of its source, and its result.
  const handedOver = new Map<string, Promise<unknown>>();
  const invoke = executor.invoke;
  executor.invoke = (request, onRespond) => {
    const result = invoke.call(executor, request, onRespond);
    const inv = request.invocation;
    if (inv.kind === "run") handedOver.set(String((inv.event as { query: { n: string } }).query.n), result);
    return result;
  };
  const reached = async (n: string) => {
    while (!handedOver.has(n)) await new Promise((r) => setTimeout(r, 10));
    // Its place in the queue is settled on the turn after it arrived (the executor batches one turn's calls).
    await new Promise((r) => setImmediate(r));
  };
  try {
    const g = gates.gate("drop");
    const first = hit(`${endpoint}?n=first&gate=${encodeURIComponent(g.url)}`);
    await g.entered;
    // `next` goes to the executor process behind the running batch; `gone` waits in the server's queue.
    const next = hit(`${endpoint}?n=next`);
    await within(reached("next"), "the second hit to reach the executor");
    // A client that gives up resets its connection (one that only half-closes it may still read the
    // answer, as curl does: docs/operations.md).
    const client = http.request(`${endpoint}?n=gone`, { method: "POST", agent: false });
    const gone = new Promise((resolve) => client.once("error", resolve).once("response", resolve));
    client.end("{}");
    await within(reached("gone"), "the third hit to reach the executor");
    client.socket!.resetAndDestroy();
    await gone;
    // The server hears of it and takes the hit out of the queue, failing it: it never runs.
    await within(
      handedOver.get("gone")!.then(
        () => assert.fail("the dropped hit ran"),
        () => undefined,
      ),
      "the dropped hit to fail",
    );

    g.release();
    assert.equal((await within(first, "the held hit")).status, 202);
    assert.equal((await within(next, "the hit behind it")).status, 202);
    // Queued after the dropped one: once it is stored, the dropped one would have run before it.
    assert.equal((await hit(`${endpoint}?n=last`)).status, 202);
    assert.deepEqual(await emittedNs(id), ["first", "last", "next"]);
  } finally {
    executor.invoke = invoke;
  }
});
