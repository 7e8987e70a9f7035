/**
 * What one run and one external workflow may emit. A run's emits in all are held to
 * FOUNT_MAX_RUN_EMIT_BYTES (4 KiB here): the emit that crosses it throws in the component and the run
 * fails with `run_emits_too_large`, keeping none of its emits and db writes (the server's own check of
 * what an executor sends is in test/runtime/result-limits.test.ts). Workflow emits and errors count as
 * invocations of the workflow's creator, so a free account past its daily quota gets 429
 * `quota_exceeded`, and a workflow may name at most 32 channels, as a source may.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { usageDay } from "../../src/domain/accounts/quotas.ts";
import { deploy, emitted, events, fixture } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
before(async () => {
  server = await startServer(
    {},
    { FOUNT_MAX_RUN_EMIT_BYTES: "4096", FOUNT_MAX_EVENT_BYTES: "2048", FOUNT_FREE_DAILY_INVOCATIONS: "2" },
  );
});
after(() => server.close());

/** An event of about `bytes` bytes of JSON. */
function sized(i: number, bytes: number): { event: unknown } {
  return { event: { i, pad: "x".repeat(bytes - 20) } };
}

async function manualRun(sourceId: string, body: unknown): Promise<any> {
  const run = await server.api("POST", `/v1/sources/${sourceId}/run`, { body: { event: body } });
  assert.equal(run.status, 200, run.text);
  return run.body.data;
}

async function errorCodes(sourceId: string, key?: string): Promise<string[]> {
  return (await events(server, sourceId, "$errors", key)).map((e) => e.event.error.code);
}

test("a run whose emits stay under FOUNT_MAX_RUN_EMIT_BYTES keeps them all", async () => {
  const source = await deploy(server, { component_code: fixture("emitter.mjs") });
  const data = await manualRun(source.id, { emits: [sized(1, 1000), sized(2, 1000), sized(3, 1000)] });
  assert.equal(data.ok, true, JSON.stringify(data.error));
  assert.deepEqual(
    (await emitted(server, source.id)).map((e) => e.i),
    [1, 2, 3],
  );
});

test("a run whose emits pass FOUNT_MAX_RUN_EMIT_BYTES fails, keeping none of its emits or db writes", async () => {
  const source = await deploy(server, { component_code: fixture("emitter.mjs") });
  const emits = [1, 2, 3, 4, 5].map((i) => sized(i, 1000));
  const data = await manualRun(source.id, { emits });
  assert.equal(data.ok, false);
  assert.equal(data.error.code, "run_emits_too_large");
  assert.match(data.error.message, /over the limit of 4096 per run \(FOUNT_MAX_RUN_EMIT_BYTES\)/);
  assert.deepEqual(await emitted(server, source.id), [], "no emit of the failed run is stored");
  assert.deepEqual(await errorCodes(source.id), ["run_emits_too_large"]);
  const db = await server.built.services.store.getSourceDb(source.id);
  assert.equal(db.data.runs, undefined, "the run's db write was discarded");
});

test("the emit that crosses the limit throws, and the run fails even when the component catches it", async () => {
  const code = `export default {
    name: "Catcher", version: "0.0.1", props: {},
    async run() {
      for (let i = 0; i < 10; i++) {
        try {
          this.$emit({ i, pad: "x".repeat(980) });
        } catch (err) {
          console.log("emit " + i + " threw " + err.code);
        }
      }
    },
  };`;
  const source = await deploy(server, { component_code: code });
  const data = await manualRun(source.id, {});
  assert.equal(data.ok, false);
  assert.equal(data.error.code, "run_emits_too_large");
  const logs = (await events(server, source.id, "$logs")).map((e) => e.event.message).reverse();
  // Four emits of about 1,000 bytes fit in 4,096; the fifth and every later one threw.
  assert.deepEqual(
    logs,
    [4, 5, 6, 7, 8, 9].map((i) => `emit ${i} threw run_emits_too_large`),
  );
  assert.deepEqual(await emitted(server, source.id), []);
});

test("a free account's workflow emits and errors count as invocations: past its daily quota, 429", async () => {
  const user = await server.createUser("workflow-free");
  const created = await server.api("POST", "/v1/workflows", { key: user.key, body: { name: "runner" } });
  assert.equal(created.status, 200, created.text);
  const id = created.body.data.id;
  const emit = (i: number) =>
    server.api("POST", `/v1/workflows/${id}/emits`, { key: user.key, body: { event: { i } } });
  assert.equal((await emit(1)).status, 200);
  const error = await server.api("POST", `/v1/workflows/${id}/errors`, {
    key: user.key,
    body: { original_event: {}, error: { code: "failed" } },
  });
  assert.equal(error.status, 200, error.text);
  const refused = await emit(2);
  assert.equal(refused.status, 429, refused.text);
  assert.equal(refused.body.code, "quota_exceeded");
  assert.ok(Number(refused.headers.get("retry-after")) > 0);
  const refusedError = await server.api("POST", `/v1/workflows/${id}/errors`, {
    key: user.key,
    body: { original_event: {}, error: { code: "failed" } },
  });
  assert.equal(refusedError.status, 429);
  const me = await server.api("GET", "/v1/users/me", { key: user.key });
  assert.equal(me.body.data.daily_invocations_used, 2);
  const stored = await server.api("GET", `/v1/workflows/${id}/event_summaries?expand=event`, {
    key: user.key,
  });
  assert.deepEqual(
    stored.body.data.map((e: any) => e.event),
    [{ raw_event: { i: 1 } }],
  );
});

test("a paid account's workflow emits are counted without a limit, and a body over 1 MiB gets 413", async () => {
  const user = await server.createUser("workflow-paid", "paid");
  const created = await server.api("POST", "/v1/workflows", { key: user.key, body: { name: "runner" } });
  const id = created.body.data.id;
  for (let i = 0; i < 3; i++) {
    const res = await server.api("POST", `/v1/workflows/${id}/emits`, {
      key: user.key,
      body: { event: { i } },
    });
    assert.equal(res.status, 200, res.text);
  }
  const usage = await server.built.services.store.getUsage(user.id, usageDay(Date.now()));
  assert.equal(usage.invocations, 3);
  const huge = await server.api("POST", `/v1/workflows/${id}/emits`, {
    key: user.key,
    body: { event: "x".repeat(1024 * 1024) },
  });
  assert.equal(huge.status, 413, huge.text);
  assert.equal(huge.body.code, "payload_too_large");
});

test("a workflow may use at most 32 named channels; emits to those it uses go on", async () => {
  const created = await server.api("POST", "/v1/workflows", { body: { name: "channels" } });
  const id = created.body.data.id;
  const emit = (name: string) =>
    server.api("POST", `/v1/workflows/${id}/emits`, { body: { event: { name }, name } });
  for (let i = 0; i < 32; i++) assert.equal((await emit(`c${i}`)).status, 200);
  const refused = await emit("c32");
  assert.equal(refused.status, 400, refused.text);
  assert.equal(refused.body.code, "invalid_parameter");
  assert.match(refused.body.error, /at most 32 named channels/);
  assert.equal((await emit("c5")).status, 200);
  assert.equal((await server.api("POST", `/v1/workflows/${id}/emits`, { body: { event: 1 } })).status, 200);
});
