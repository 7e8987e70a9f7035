/**
 * A component's definition is computed when it loads, so a few bytes of code can describe a prop in
 * megabytes: a definition over 1 MiB as JSON is refused with 422 `component_invalid` and nothing is
 * stored, and FOUNT_MAX_COMPONENT_BYTES_PER_OWNER counts what a save stores (code and definition), checked
 * again right before the insert, so that neither a large definition nor saves racing each other pass it.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { systemClock } from "../../src/clock.ts";
import { ComponentCatalog } from "../../src/domain/components/components.ts";
import type { ComponentRecord } from "../../src/domain/types.ts";
import type { ComponentBuilder } from "../../src/runtime/build.ts";
import type { Executor } from "../../src/runtime/types.ts";
import type { Storage } from "../../src/storage/port.ts";
import { startServer, type TestServer } from "../helpers.ts";

const MiB = 1024 * 1024;
// Room for six of the ~10 KB definitions below, not for seven.
const LIMIT = 64 * 1024;

let server: TestServer;

before(async () => {
  server = await startServer({}, { FOUNT_MAX_COMPONENT_BYTES_PER_OWNER: String(LIMIT) });
});
after(() => server.close());

/** A component of some 200 bytes of code whose prop's description is `repeat` computed at load. */
function computed(key: string, repeat: string): string {
  return `export default { key: "${key}", name: "Computed", version: "1.0.0", type: "source",
  props: { note: { type: "string", label: "Note", description: ${repeat} } },
  async run() { this.$emit({ note: this.note }); } };
`;
}

function save(key: string, code: string) {
  return server.api("POST", "/v1/components", { key, body: { component_code: code } });
}

/** The owner's stored bytes, as a save that cannot fit reports them. */
async function usedBytes(key: string): Promise<number> {
  const refused = await save(key, computed("fount-def-probe", `"p".repeat(${2 * LIMIT})`));
  assert.equal(refused.status, 409, refused.text.slice(0, 300));
  return refused.body.details.used_bytes;
}

test("a definition over 1 MiB is refused with 422 component_invalid and nothing is stored; the same code with a small one saves", async () => {
  const owner = await server.createUser("component-def-over");
  const over = await save(owner.key, computed("fount-def-over", `"w".repeat(${MiB + 1024})`));
  assert.equal(over.status, 422, over.text.slice(0, 500));
  assert.equal(over.body.code, "component_invalid");
  assert.match(over.body.error, /definition.*over 1048576 bytes/);
  assert.equal(over.body.details.limit_bytes, MiB);
  assert.ok(over.text.length < 4096, "the answer does not carry the definition");

  // Escaped characters count as JSON has them: 6 bytes each here, 1.2 MB in all.
  const escaped = await save(owner.key, computed("fount-def-escaped", `"\\u0001".repeat(200000)`));
  assert.equal(escaped.status, 422, escaped.text.slice(0, 500));
  assert.equal(escaped.body.code, "component_invalid");
  assert.equal(escaped.body.details.limit_bytes, MiB);

  // A deploy with such code is refused too, and creates no source.
  const deploy = await server.api("POST", "/v1/sources", {
    key: owner.key,
    body: { component_code: computed("fount-def-deploy", `"w".repeat(${2 * MiB})`) },
  });
  assert.equal(deploy.status, 422, deploy.text.slice(0, 500));
  assert.equal(deploy.body.code, "component_invalid");
  const sources = await server.api("GET", "/v1/users/me/sources", { key: owner.key });
  assert.deepEqual(sources.body.data, []);

  // So is a registry publish (by an administrator: the default key).
  const published = await server.api("POST", "/v1/admin/registry", {
    body: { component_code: computed("fount-def-registry", `"w".repeat(${2 * MiB})`) },
  });
  assert.equal(published.status, 422, published.text.slice(0, 500));
  assert.equal(published.body.details.limit_bytes, MiB);
  const registry = await server.api("GET", "/v1/components/registry/fount-def-registry", { key: owner.key });
  assert.equal(registry.status, 404, registry.text.slice(0, 200));

  for (const key of ["fount-def-over", "fount-def-escaped", "fount-def-deploy"]) {
    const got = await server.api("GET", `/v1/components/${key}`, { key: owner.key });
    assert.equal(got.status, 404, `${key}: ${got.text.slice(0, 200)}`);
  }
  assert.equal(await usedBytes(owner.key), 0, "nothing was stored");

  const small = await save(owner.key, computed("fount-def-over", `"w".repeat(1000)`));
  assert.equal(small.status, 200, small.text);
  assert.equal(small.body.data.configurable_props[0].description.length, 1000);
});

test("a definition under the bound whose code and definition pass FOUNT_MAX_COMPONENT_BYTES_PER_OWNER is refused with 409", async () => {
  const owner = await server.createUser("component-def-quota");
  const first = await save(owner.key, computed("fount-def-a", `"a".repeat(40000)`));
  assert.equal(first.status, 200, first.text.slice(0, 300));
  const used = await usedBytes(owner.key);
  assert.ok(used > 40000 && used < 41000, `used_bytes ${used}: the stored code and definition`);

  // 200 bytes of code fit; with its 40 KB definition the record does not.
  const second = await save(owner.key, computed("fount-def-b", `"b".repeat(40000)`));
  assert.equal(second.status, 409, second.text.slice(0, 300));
  assert.equal(second.body.code, "component_quota_exceeded");
  assert.equal(second.body.details.used_bytes, used);
  assert.equal(second.body.details.limit_bytes, LIMIT);
  const got = await server.api("GET", "/v1/components/fount-def-b", { key: owner.key });
  assert.equal(got.status, 404, got.text.slice(0, 200));
  assert.equal(await usedBytes(owner.key), used, "nothing was stored");

  // What still fits saves.
  const third = await save(owner.key, computed("fount-def-c", `"c".repeat(20000)`));
  assert.equal(third.status, 200, third.text.slice(0, 300));
});

test("saves of one owner sent at once never take it past the bound", async () => {
  const owner = await server.createUser("component-def-race");
  // Each record is some 10.2 KB: six fit in 64 KiB, seven do not.
  const sent = 9;
  const answers = await Promise.all(
    Array.from({ length: sent }, (_, i) => save(owner.key, computed(`fount-race-${i}`, `"r".repeat(10000)`))),
  );
  const statuses = answers.map((a) => a.status).sort();
  assert.deepEqual(
    statuses,
    [200, 200, 200, 200, 200, 200, 409, 409, 409],
    answers.map((a) => a.text.slice(0, 200)).join("\n"),
  );
  for (const refused of answers.filter((a) => a.status === 409)) {
    assert.equal(refused.body.code, "component_quota_exceeded");
  }
  const used = await usedBytes(owner.key);
  assert.ok(used <= LIMIT && used > 6 * 10000, `used_bytes ${used} within ${LIMIT}`);

  // The same code sent at once is stored once.
  const other = await server.createUser("component-def-same");
  const same = await Promise.all(
    Array.from({ length: 4 }, () => save(other.key, computed("fount-same", `"s".repeat(10000)`))),
  );
  assert.deepEqual(
    same.map((a) => a.status),
    [200, 200, 200, 200],
  );
  assert.equal(new Set(same.map((a) => a.body.data.id)).size, 1);
  const once = await usedBytes(other.key);
  assert.ok(once > 10000 && once < 11000, `used_bytes ${once}: one record`);
});

test("a definition just under 1 MiB saves where the owner's bound has room for it", async () => {
  const roomy = await startServer({}, { FOUNT_MAX_COMPONENT_BYTES_PER_OWNER: String(4 * MiB) });
  try {
    const owner = await roomy.createUser("component-def-under");
    const res = await roomy.api("POST", "/v1/components", {
      key: owner.key,
      body: { component_code: computed("fount-def-under", `"u".repeat(${MiB - 4096})`) },
    });
    assert.equal(res.status, 200, res.text.slice(0, 300));
  } finally {
    await roomy.close();
  }
});

test("saves whose builds end together check the bound one at a time, right before their inserts", async () => {
  // A store whose reads are slow: without the owner's turns every save would read the same total.
  const rows: ComponentRecord[] = [];
  const slow = () => new Promise((resolve) => setTimeout(resolve, 20));
  const store = {
    findSameComponent: async () => undefined,
    componentBytes: async () => {
      const n = rows.reduce((sum, r) => sum + r.code.length + JSON.stringify(r.meta).length + 2, 0);
      await slow();
      return n;
    },
    transaction: async <T>(fn: (tx: unknown) => Promise<T>) => fn(store),
    acquireTransactionLock: async () => {},
    insertComponent: async (r: ComponentRecord) => {
      rows.push(r);
    },
  };
  const meta = { name: "M", version: "1", type: "source", props: [] };
  const catalog = new ComponentCatalog({
    store: store as unknown as Storage,
    builder: { build: async () => ({ dependencies: {} }) } as unknown as ComponentBuilder,
    executor: { inspect: async () => meta } as unknown as Executor,
    clock: systemClock,
    maxOwnerBytes: 3 * 1100,
  });
  const results = await Promise.allSettled(
    Array.from({ length: 6 }, (_, i) => catalog.save("usr_race", { code: `// ${i}${"x".repeat(1000)}` })),
  );
  assert.equal(results.filter((r) => r.status === "fulfilled").length, 3);
  assert.equal(rows.length, 3);
});
