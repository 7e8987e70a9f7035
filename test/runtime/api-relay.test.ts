/**
 * The pool's relay of component requests to Pipedream's API (runtime/executors/api-relay.ts): what a
 * child sends is untrusted, so only well-formed requests under /v1 reach the API handler, each gets
 * exactly one answer, and an account's components may have only so many waiting at once. The HTTP-level
 * behaviour is in test/http/pipedream-api.test.ts.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import type { ToChild } from "../../src/runtime/child/protocol.ts";
import { ApiRelay, MAX_API_REQUESTS_PER_OWNER } from "../../src/runtime/executors/api-relay.ts";
import type { Child } from "../../src/runtime/executors/model.ts";
import type { ComponentApiRequest, ComponentApiResponse } from "../../src/runtime/types.ts";

const bodyLimit = 1024;

/** A relay whose handler answers when the test says; `sent` collects what the child would get. */
function relay() {
  const handled: Array<{ request: ComponentApiRequest; answer: (r: ComponentApiResponse) => void }> = [];
  const sent: Array<{ id: number; status: number; body: any }> = [];
  const instance = new ApiRelay({
    bodyLimit,
    handler: (request) =>
      new Promise<ComponentApiResponse>((resolve) => {
        handled.push({ request, answer: resolve });
      }),
    send: (_child, message: ToChild) => {
      if (message.t !== "api") return;
      const body = Buffer.from(message.response.body, "base64").toString();
      sent.push({ id: message.id, status: message.response.status, body: body ? JSON.parse(body) : null });
    },
  });
  return { instance, handled, sent };
}

function child(ownerId: string): Child {
  return { owner: { id: ownerId }, gone: false } as unknown as Child;
}

const ok: ComponentApiResponse = { status: 200, headers: {}, body: "" };
const request = (over: Partial<Record<keyof ComponentApiRequest, unknown>> = {}) => ({
  method: "GET",
  url: "/v1/users/me",
  headers: { authorization: "Bearer k" },
  body: "",
  ...over,
});
const settle = () => new Promise((resolve) => setImmediate(resolve));

test("only well-formed requests under /v1 reach the API; the others are answered with the API's errors", async () => {
  const { instance, handled, sent } = relay();
  const c = child("u_1");
  instance.onRequest(c, 1, request({ url: "/v1/sources?limit=2" }));
  instance.onRequest(c, 2, request({ url: "/v1/../metrics" }));
  instance.onRequest(c, 3, request({ url: "/v1/%2e%2e/healthz" }));
  instance.onRequest(c, 4, request({ url: "/v1x" }));
  instance.onRequest(c, 5, request({ method: "TRACE" }));
  instance.onRequest(c, 6, request({ headers: { a: 1 } }));
  instance.onRequest(c, 7, request({ body: "A".repeat(2000) }));
  instance.onRequest(c, 8, "not an object");
  instance.onRequest(c, "9", request());
  await settle();
  assert.deepEqual(
    handled.map((h) => h.request.url),
    ["/v1/sources?limit=2"],
  );
  assert.deepEqual(
    sent.map((s) => [s.id, s.status, s.body.code]),
    [
      [2, 404, "not_found"],
      [3, 404, "not_found"],
      [4, 404, "not_found"],
      [5, 405, "method_not_allowed"],
      [6, 400, "invalid_parameter"],
      [7, 413, "payload_too_large"],
      [8, 400, "invalid_parameter"],
    ],
  );
  handled[0]!.answer(ok);
  await settle();
  assert.deepEqual(sent.at(-1), { id: 1, status: 200, body: null });
});

test("an account has at most a fixed number of requests waiting at once; others' are not affected", async () => {
  const { instance, handled, sent } = relay();
  const busy = child("u_busy");
  for (let id = 1; id <= MAX_API_REQUESTS_PER_OWNER + 1; id++) instance.onRequest(busy, id, request());
  instance.onRequest(child("u_other"), 100, request());
  await settle();
  assert.equal(handled.length, MAX_API_REQUESTS_PER_OWNER + 1);
  assert.deepEqual(
    sent.map((s) => [s.id, s.status, s.body.code]),
    [[MAX_API_REQUESTS_PER_OWNER + 1, 429, "rate_limited"]],
  );
  // Once one is answered, the account may send another.
  handled[0]!.answer(ok);
  await settle();
  instance.onRequest(busy, 200, request());
  await settle();
  assert.equal(handled.length, MAX_API_REQUESTS_PER_OWNER + 2);
});

test("a handler that fails answers 500 without details, and a gone child gets nothing", async () => {
  const sent: Array<[number, string]> = [];
  const failing = new ApiRelay({
    bodyLimit,
    handler: () => Promise.reject(new Error("db password in here")),
    send: (_c, m) => {
      if (m.t === "api") sent.push([m.response.status, Buffer.from(m.response.body, "base64").toString()]);
    },
  });
  failing.onRequest(child("u_1"), 1, request());
  const gone = child("u_2");
  (gone as { gone: boolean }).gone = true;
  failing.onRequest(gone, 2, request());
  await settle();
  assert.deepEqual(sent, [[500, JSON.stringify({ error: "Internal server error", code: "internal" })]]);
});
