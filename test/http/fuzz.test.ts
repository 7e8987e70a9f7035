/**
 * 10,000 generated requests (fuzz-requests.ts) across every operation of `/openapi.json`, the routes it
 * leaves out (the console's among them) and the source endpoints: not one 5xx, every error a catalogue
 * JSON body, nothing logged at error level, and the server still answers afterwards. It runs on
 * PostgreSQL too (test/http-postgres/fuzz.test.ts), which refuses what SQLite takes (U+0000 in text).
 * FOUNT_FUZZ_SEED and FOUNT_FUZZ_REQUESTS pick another stream.
 */
import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { after, before, test } from "node:test";
import { errorCatalogue } from "../../src/errors.ts";
import { deploy, fixture } from "../fixtures/components/fixtures.ts";
import { adminKey, startServer, type TestServer } from "../helpers.ts";
import { type FuzzAnswer, type FuzzRequest, fuzzRequests, sendAll } from "./fuzz-requests.ts";
import { ensureAll, hiddenOperations, makerContext, operations, ownValues, unique } from "./openapi-walk.ts";

const seed = Number(process.env.FOUNT_FUZZ_SEED ?? 15);
const count = Number(process.env.FOUNT_FUZZ_REQUESTS ?? 10_000);

/** Log lines at error level or above (pino level ≥ 50). */
const errorLines: string[] = [];
const stream = new Writable({
  write(chunk, _encoding, done) {
    for (const line of String(chunk).split("\n")) if (/"level":(5\d|60)/.test(line)) errorLines.push(line);
    done();
  },
});

let server: TestServer;
before(async () => {
  server = await startServer({}, {}, { logger: { level: "warn", stream }, publishRegistry: true });
});
after(() => server.close());

// Thousands of requests take minutes on a loaded 2-core machine: past the suite's 120 s default bound,
// which is for one behaviour, not a sweep.
const sweepTimeoutMs = 900_000;

test(`${count} generated requests to every route and to source endpoints get no 5xx (seed ${seed})`, {
  timeout: sweepTimeoutMs,
}, async () => {
  const ops = await operations(server);
  const hidden = hiddenOperations(server, ops);
  const user = await server.createUser(unique("fuzzed"), "paid");
  const ctx = makerContext(server, ops, user);
  await ensureAll(ctx, ops);
  const values = new Map<string, Record<string, unknown>>();
  for (const op of ops) {
    const all = await ownValues(
      ctx,
      op,
      op.params.map((p) => p.name),
    ).catch(() => ownValues(ctx, op));
    values.set(op.label, all ?? {});
  }
  // Endpoints of another user, so that the API requests (with this user's key) cannot delete them.
  const hosting = await server.createUser(unique("hosting"), "paid");
  const endpoints: string[] = [];
  for (const file of ["http-echo.mjs", "responder.mjs"]) {
    const source = await deploy(server, { component_code: fixture(file) }, hosting.key);
    endpoints.push(new URL(source.configured_props.http.endpoint_url).pathname);
  }

  const serverErrors: string[] = [];
  const badBodies: string[] = [];
  const statuses = new Map<number, number>();
  const describe = (req: FuzzRequest, a: FuzzAnswer) =>
    `${req.method} ${req.path.slice(0, 150)} [${req.target}] ${req.body?.subarray(0, 150).toString() ?? ""} → ${a.status} ${a.text.slice(0, 200)}`;
  const sent = await sendAll(
    server.url,
    fuzzRequests(
      { ops, userKey: user.key, adminKey, values, endpoints, endpointBase: server.endpoints, hidden },
      seed,
      count,
    ),
    8,
    (req, a) => {
      statuses.set(a.status, (statuses.get(a.status) ?? 0) + 1);
      if (a.status >= 500 || a.status === 0) serverErrors.push(describe(req, a));
      else if (a.status >= 400 && req.method !== "HEAD") {
        let code: unknown;
        try {
          code = JSON.parse(a.text).code;
        } catch {
          code = undefined;
        }
        const entry = (errorCatalogue as Record<string, { status: number }>)[String(code)];
        if (!a.contentType.startsWith("application/json") || entry?.status !== a.status)
          badBodies.push(describe(req, a));
      }
    },
  );
  assert.equal(sent, count);
  const summary = JSON.stringify(Object.fromEntries([...statuses].sort((a, b) => a[0] - b[0])));
  assert.deepEqual(serverErrors.slice(0, 20), [], `no 5xx (statuses: ${summary})`);
  assert.deepEqual(badBodies.slice(0, 20), [], "every error answer is a catalogue JSON body");
  assert.deepEqual(errorLines.slice(0, 5), [], "nothing logged at error level");
  // The fuzzing reached past validation: some requests succeeded, on the API and on the endpoints.
  assert.ok((statuses.get(200) ?? 0) > count / 20, `enough successes: ${summary}`);
  const health = await server.api("GET", "/readyz", { key: null });
  assert.equal(health.status, 200);
});
