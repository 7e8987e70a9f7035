/**
 * A cluster's first start: three Fount processes started at once on an empty PostgreSQL schema all come
 * up, and publish Fount's own registry components once between them.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import pg from "pg";
import { testPgUrl } from "../pg-schemas.ts";
import { api, type Cluster, startCluster } from "./nodes.ts";

let cluster: Cluster | undefined;
after(async () => {
  await cluster?.stop();
});

test("nodes started together on an empty schema come up with one copy of each registry component", async () => {
  cluster = await startCluster(["s1", "s2", "s3"], {}, { together: true });
  const client = new pg.Client({ connectionString: testPgUrl });
  await client.connect();
  let rows: Array<{ key: string; copies: number }>;
  try {
    ({ rows } = await client.query(
      `SELECT key, count(*)::int AS copies FROM "${cluster.schema}".components
       WHERE owner_id = 'registry' GROUP BY key ORDER BY key`,
    ));
  } finally {
    await client.end();
  }
  assert.ok(rows.length >= 4, `registry components: ${JSON.stringify(rows)}`);
  assert.deepEqual(
    rows.filter((r) => r.copies !== 1),
    [],
  );
  // Every node serves the API with the one admin the first start created.
  for (const n of cluster.nodes) assert.equal((await api(n, "GET", "/v1/users/me")).status, 200, n.name);
});

test("a component published to the registry through every node at once is stored once", async () => {
  const nodes = cluster?.nodes ?? [];
  assert.equal(nodes.length, 3, "started by the test above");
  for (let round = 0; round < 3; round++) {
    const code = `export default {
      name: "Shared ${round}",
      key: "shared-at-once-${round}",
      version: "1.0.${round}",
      props: { http: "$.interface.http" },
      run(event) { this.$emit(event.body); },
    };`;
    const answers = await Promise.all(
      nodes.map((n) => api(n, "POST", "/v1/admin/registry", { component_code: code })),
    );
    for (const a of answers) assert.equal(a.status, 200, JSON.stringify(a.body));
    assert.equal(answers.filter((a) => a.body.data.created).length, 1, JSON.stringify(answers));
    assert.equal(new Set(answers.map((a) => a.body.data.id)).size, 1, "every node answers with the one copy");
  }
});
