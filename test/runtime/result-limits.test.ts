/**
 * The pool's copy of an executor's result (runtime/executors/results.ts) holds the emits to the limits
 * the executor was asked to keep, since a compromised executor could send anything: an event over
 * `maxEmitBytes` is dropped with a warning, and emits over `maxRunEmitBytes` in all fail the run with
 * none of its emits or db writes kept. The executor's own check is in test/http/run-emit-bounds.test.ts.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import type { ChildInit, ItemResult } from "../../src/runtime/child/protocol.ts";
import { copyResult } from "../../src/runtime/executors/results.ts";

const limits = {
  maxEmitBytes: 2048,
  maxEmitsPerInvocation: 1000,
  maxRunEmitBytes: 4096,
  maxLogsPerInvocation: 1000,
} as ChildInit;

/** A result as a child sends it, with `count` emits of about `bytes` bytes of JSON each. */
function sent(count: number, bytes: number, meta: Record<string, unknown> = {}): ItemResult {
  const emits = Array.from({ length: count }, (_, i) => ({
    event: { i, pad: "x".repeat(bytes - 20) },
    meta,
  }));
  return { q: 1, emits, logs: [], dbWrites: { cursor: 9 }, warnings: [], durationMs: 1 } as ItemResult;
}

test("emits under the run's limit are copied with the run's db writes", () => {
  const result = copyResult(sent(4, 1000), limits);
  assert.equal(result.error, undefined);
  assert.equal(result.emits.length, 4);
  assert.deepEqual(result.dbWrites, { cursor: 9 });
});

test("emits over maxRunEmitBytes in all fail the run, keeping none of its emits or db writes", () => {
  const result = copyResult(sent(8, 1000), limits);
  assert.equal(result.error?.code, "run_emits_too_large");
  assert.match(result.error?.message ?? "", /more than 4096 bytes/);
  assert.deepEqual(result.emits, []);
  assert.deepEqual(result.dbWrites, {});
});

test("a meta's text counts toward the run's limit", () => {
  const result = copyResult(sent(2, 100, { summary: "s".repeat(5000) }), limits);
  assert.equal(result.error?.code, "run_emits_too_large");
});

test("an event over maxEmitBytes is dropped with an emit_too_large warning; the others are kept", () => {
  const raw = sent(2, 500);
  raw.emits.splice(1, 0, { event: { pad: "x".repeat(3000) }, meta: {} });
  const result = copyResult(raw, limits);
  assert.equal(result.error, undefined);
  assert.deepEqual(
    result.emits.map((e) => (e.event as { i: number }).i),
    [0, 1],
  );
  assert.deepEqual(
    result.warnings.map((w) => [w.code, w.data?.count]),
    [["emit_too_large", 1]],
  );
});
