/**
 * Tenancy, route by route from the app's own OpenAPI document: another tenant's ID in any parameter is a
 * 404 (never a 403, never a success), and the same request with the caller's own ID succeeds, so the 404
 * comes from the ID alone.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { adminKey, startServer, type TestServer } from "../helpers.ts";
import {
  assertApiError,
  ensureAll,
  ensureFixture,
  idPrefixes,
  makerContext,
  type Operation,
  operations,
  ownValues,
  type Param,
  send,
  snapshot,
  toRequest,
  unique,
} from "./openapi-walk.ts";

let server: TestServer;
before(async () => {
  server = await startServer({}, {}, { publishRegistry: true });
});
after(() => server.close());

/** Routes that hold no tenant data, and why. Admin routes are checked separately (403 to non-admins). */
const excluded: Record<string, string> = {
  "GET /healthz": "public liveness probe, no tenant data",
  "GET /readyz": "public readiness probe, no tenant data",
  "GET /v1/components/registry": "lists the registry, which every user shares; no tenant data",
  "GET /v1/users/me/sessions":
    "takes no ID: lists the caller's own console sessions (test/http/sessions.test.ts: another user's are not listed)",
};

/** Routes whose control request (the caller's own IDs) cannot succeed yet, and why. */
const noControl: Record<string, string> = {
  "GET /v1/components/registry/{key}": "the registry is empty in a fresh store, so no key can be read",
  "GET /v1/apps/{app}": "apps are known from components' app props, and no walker component has one",
  "GET /v1/sources/{id}/events/{event_id}":
    "the walk's event ID is no stored event of the caller's (test/http/delivery-history.test.ts reads real ones)",
  "POST /v1/sources/{id}/events/{event_id}/replay":
    "the walk's event ID is no stored event of the caller's (test/http/delivery-history.test.ts replays real ones)",
};

interface Case {
  slot: Param;
  prefix: string;
}

test("every route answers 404 to another tenant's IDs and succeeds with the caller's own", async (t) => {
  const ops = await operations(server);
  const owner = makerContext(server, ops, await server.createUser(unique("owner")));
  const intruder = makerContext(server, ops, await server.createUser(unique("intruder")));

  const plan: Array<{ op: Operation; cases: Case[] }> = [];
  for (const op of ops) {
    if (op.admin || excluded[op.label]) continue;
    assert.ok(!op.public, `${op.label} answers without a key: add it to \`excluded\` with a reason`);
    const cases: Case[] = [];
    for (const slot of op.params.filter((p) => idPrefixes(op, p))) {
      for (const prefix of idPrefixes(op, slot)!) {
        // A kind nobody can create has no foreign ID to try.
        if (await ensureFixture(owner, prefix)) cases.push({ slot, prefix });
      }
    }
    assert.ok(cases.length > 0, `${op.label} takes no ID and no org_id, so its tenancy cannot be checked`);
    plan.push({ op, cases });
  }
  // Deletions last, so that a wrongly accepted one cannot turn later cases into 404s for another reason.
  plan.sort((a, b) => Number(a.op.method === "DELETE") - Number(b.op.method === "DELETE"));

  /** The intruder's own values everywhere, except the case's slot, which gets `slotValue`. */
  const request = async (ctx: typeof intruder, op: Operation, c: Case, slotValue: string) => {
    const values = await ownValues(ctx, op);
    assert.ok(values, `${op.label}: the intruder's own values`);
    return toRequest(op, { ...values, [c.slot.name]: slotValue });
  };

  await ensureAll(owner, ops);
  await ensureAll(intruder, ops);
  const before = await snapshot(owner, ops, adminKey, { tenantOnly: true });

  for (const { op, cases } of plan) {
    await t.test(op.label, async () => {
      for (const c of cases) {
        const foreign = (await ensureFixture(owner, c.prefix))!;
        const req = await request(intruder, op, c, foreign);
        const res = await send(server, op, intruder.user.key, req);
        assertApiError(res, { status: 404, code: "not_found" }, `${op.method} ${req.path} (${c.slot.name})`);
      }
      // The control: the same requests with the intruder's own IDs succeed. A deletion gets fresh
      // resources, and what it deletes is first created by the POST on the same path, if there is one.
      if (noControl[op.label]) return;
      for (const c of cases) {
        const ctx = op.method === "DELETE" ? makerContext(server, ops, intruder.user) : intruder;
        const own = await ensureFixture(ctx, c.prefix);
        assert.ok(own, `${op.label}: the intruder's own ${c.prefix}_ resource`);
        const req = await request(ctx, op, c, own);
        const create = ops.find((o) => o.method === "POST" && o.path === op.path);
        if (op.method === "DELETE" && create) {
          const values = { ...(await ownValues(ctx, create)), [c.slot.name]: own };
          const made = await send(server, create, ctx.user.key, toRequest(create, values));
          assert.equal(made.status, 200, `${create.label} before ${op.label}: ${made.text}`);
        }
        const res = await send(server, op, ctx.user.key, req);
        assert.ok(
          res.status >= 200 && res.status < 300,
          `${op.method} ${req.path} → ${res.status} ${res.text}`,
        );
      }
    });
  }

  await t.test("the owner's data did not change", async () => {
    assert.deepEqual(await snapshot(owner, ops, adminKey, { tenantOnly: true }), before);
  });
});

test("admin routes answer 403 to a non-admin key, whatever the parameters", async () => {
  const ops = await operations(server);
  const admin = ops.filter((op) => op.admin);
  assert.ok(admin.length >= 6, "the admin API is in the OpenAPI document");
  const owner = makerContext(server, ops, await server.createUser(unique("owner")));
  const intruder = await server.createUser(unique("intruder"));
  await ensureAll(owner, ops);
  const before = await snapshot(owner, ops, adminKey, { tenantOnly: true });
  for (const op of admin) {
    const values = await ownValues(owner, op);
    assert.ok(values, op.label);
    const req = toRequest(op, values);
    for (const key of [intruder.key, owner.user.key]) {
      assertApiError(await send(server, op, key, req), { status: 403, code: "forbidden" }, req.path);
    }
    // Malformed input does not get past the role check either.
    const bad = toRequest(op, values, op.hasBody ? { body: { unknown_field: 1 } } : { query: { x: "1" } });
    assertApiError(await send(server, op, intruder.key, bad), { status: 403, code: "forbidden" }, bad.path);
  }
  assert.deepEqual(await snapshot(owner, ops, adminKey, { tenantOnly: true }), before);
});
