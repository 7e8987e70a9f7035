/**
 * What an owner's saved components keep: the same code saved again answers the component saved before
 * and stores nothing, and past FOUNT_MAX_COMPONENT_BYTES_PER_OWNER a save (POST /v1/components, or a
 * deploy with code) is refused with 409 `component_quota_exceeded`, storing nothing; other owners save on.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startServer, type TestServer } from "../helpers.ts";

// Room for two of the ~4 KiB components below with their definitions, not for three.
const LIMIT = 10_000;

let server: TestServer;

before(async () => {
  server = await startServer({}, { FOUNT_MAX_COMPONENT_BYTES_PER_OWNER: String(LIMIT) });
});
after(() => server.close());

/** A source component of about 4 KiB (a comment pads it), with this key and version. */
function padded(key: string | undefined, version: string): string {
  const keyLine = key === undefined ? "" : `key: "${key}", `;
  return `// ${"x".repeat(4000)}
export default { ${keyLine}name: "Padded", version: "${version}", type: "source",
  async run() { this.$emit({ version: "${version}" }); } };
`;
}

async function save(key: string, code: string) {
  return server.api("POST", "/v1/components", { key, body: { component_code: code } });
}

test("an owner past FOUNT_MAX_COMPONENT_BYTES_PER_OWNER gets 409 component_quota_exceeded, nothing is stored, and another owner saves on", async () => {
  const owner = await server.createUser("component-quota-owner");
  const first = await save(owner.key, padded("fount-quota", "1.0.0"));
  assert.equal(first.status, 200, first.text);
  const second = await save(owner.key, padded("fount-quota", "1.0.1"));
  assert.equal(second.status, 200, second.text);

  const refused = await save(owner.key, padded("fount-quota", "1.0.2"));
  assert.equal(refused.status, 409, refused.text);
  assert.equal(refused.body.code, "component_quota_exceeded");
  assert.equal(refused.body.details.limit_bytes, LIMIT);
  const used = refused.body.details.used_bytes;
  assert.ok(used > 8000 && used <= LIMIT, `used_bytes ${used}: both stored records, code and definition`);
  assert.equal(refused.headers.get("retry-after"), null, "a storage bound does not reset with time");

  // Nothing was stored: the key still gives the second save, and the usage is what it was.
  const byKey = await server.api("GET", "/v1/components/fount-quota", { key: owner.key });
  assert.equal(byKey.status, 200, byKey.text);
  assert.equal(byKey.body.data.id, second.body.data.id);
  const again = await save(owner.key, padded("fount-quota", "1.0.2"));
  assert.equal(again.status, 409, again.text);
  assert.equal(again.body.details.used_bytes, used);

  // A deploy that saves code is a save too, and creates no source.
  const deploy = await server.api("POST", "/v1/sources", {
    key: owner.key,
    body: { component_code: padded("fount-quota-deploy", "1.0.0") },
  });
  assert.equal(deploy.status, 409, deploy.text);
  assert.equal(deploy.body.code, "component_quota_exceeded");
  const sources = await server.api("GET", "/v1/users/me/sources", { key: owner.key });
  assert.equal(sources.status, 200, sources.text);
  assert.deepEqual(sources.body.data, []);

  const other = await server.createUser("component-quota-other");
  const theirs = await save(other.key, padded("fount-quota", "1.0.2"));
  assert.equal(theirs.status, 200, theirs.text);
});

test("saving the same code again answers the component saved before and does not grow the owner's usage", async () => {
  const owner = await server.createUser("component-resave-owner");
  const code = padded("fount-resave", "1.0.0");
  const first = await save(owner.key, code);
  assert.equal(first.status, 200, first.text);
  // Two copies would pass the limit with a third save; the same code saved again stores none.
  for (let i = 0; i < 3; i++) {
    const again = await save(owner.key, code);
    assert.equal(again.status, 200, again.text);
    assert.deepEqual(again.body.data, first.body.data);
  }
  const keyless = padded(undefined, "2.0.0");
  const one = await save(owner.key, keyless);
  assert.equal(one.status, 200, one.text);
  const two = await save(owner.key, keyless);
  assert.equal(two.status, 200, two.text);
  assert.equal(two.body.data.id, one.body.data.id);
  // Both records fit; a third different one would not: nothing more was stored by the repeats.
  const third = await save(owner.key, padded("fount-resave-other", "1.0.0"));
  assert.equal(third.status, 409, third.text);
  assert.ok(third.body.details.used_bytes > 8000, third.text);
  // The first ID still answers, and a deploy by it works.
  assert.equal(
    (await server.api("GET", `/v1/components/${first.body.data.id}`, { key: owner.key })).status,
    200,
  );
  const deployed = await server.api("POST", "/v1/sources", {
    key: owner.key,
    body: { component_id: first.body.data.id },
  });
  assert.equal(deployed.status, 200, deployed.text);
});

test("code saved again after another version of its key is a new newest version, so the key gives the latest save", async () => {
  const other = await server.createUser("component-resave-order");
  const a = await save(
    other.key,
    `export default { key: "fount-order", name: "A", version: "1", run() {} };`,
  );
  const b = await save(
    other.key,
    `export default { key: "fount-order", name: "B", version: "2", run() {} };`,
  );
  const a2 = await save(
    other.key,
    `export default { key: "fount-order", name: "A", version: "1", run() {} };`,
  );
  assert.deepEqual([a.status, b.status, a2.status], [200, 200, 200]);
  assert.notEqual(a2.body.data.id, a.body.data.id, "the older copy is not the newest of its key");
  const byKey = await server.api("GET", "/v1/components/fount-order", { key: other.key });
  assert.equal(byKey.body.data.id, a2.body.data.id);
  assert.equal(byKey.body.data.version, "1");
});
