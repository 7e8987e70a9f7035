/**
 * Deliveries to a source go to the node that runs it (three Fount processes on one PostgreSQL schema):
 * a listener source subscribed to emitters hit through two different nodes gets every event once, in
 * its own `this.db` count, and its run lease ends on the node the placement names.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import pg from "pg";
import { ownerOf } from "../../src/domain/cluster/placement.ts";
import { testPgUrl } from "../pg-schemas.ts";
import { api, type Cluster, eventually, type Node, startCluster } from "./nodes.ts";

const emitterCode = `export default {
  name: "Emitter",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  run(event) { this.$emit({ k: event.body?.k ?? null }); },
};`;
const listenerCode = `export default {
  name: "Listener",
  version: "0.0.1",
  props: { db: "$.service.db" },
  async run(event) {
    const n = (this.db.get("n") ?? 0) + 1;
    this.db.set("n", n);
    this.$emit({ n, k: event.k });
  },
};`;

let cluster: Cluster;
before(async () => {
  cluster = await startCluster(["d1", "d2", "d3"]);
});
after(async () => {
  await cluster?.stop();
});

async function deploy(through: Node, code: string): Promise<{ id: string; path: string | undefined }> {
  const res = await api(through, "POST", "/v1/sources", { component_code: code });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  const url = res.body.data.endpoint_url as string | undefined;
  return { id: res.body.data.id, path: url === undefined ? undefined : new URL(url).pathname };
}

/** The source's run lease: its generation (one more each time a node takes it) and holder. */
async function lease(sourceId: string): Promise<{ gen: number; node: string } | undefined> {
  const client = new pg.Client({ connectionString: testPgUrl });
  await client.connect();
  try {
    const { rows } = await client.query(
      `SELECT gen, node_id FROM "${cluster.schema}".source_leases WHERE source_id = $1`,
      [sourceId],
    );
    return rows[0] ? { gen: Number(rows[0].gen), node: rows[0].node_id } : undefined;
  } finally {
    await client.end();
  }
}

test("a source subscribed to emitters run on two nodes runs every delivery on one node", async () => {
  const [d1, d2] = [cluster.node("d1"), cluster.node("d2")];
  const a = await deploy(d1, emitterCode);
  const b = await deploy(d1, emitterCode);
  const listener = await deploy(d1, listenerCode);
  for (const emitter of [a, b]) {
    const sub = await api(
      d1,
      "POST",
      `/v1/subscriptions?emitter_id=${emitter.id}&listener_id=${listener.id}`,
    );
    assert.equal(sub.status, 200, JSON.stringify(sub.body));
  }
  // a's hits through d1 and b's through d2: their emits are committed, and their deliveries queued, there.
  const perEmitter = 100;
  const drive = async (n: Node, path: string, tag: string) => {
    let i = 0;
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        while (i < perEmitter) {
          const k = `${tag}${i++}`;
          const res = await fetch(`${n.endpoints}${path}`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ k }),
          });
          assert.equal(res.status, 200);
          await res.arrayBuffer();
        }
      }),
    );
  };
  await Promise.all([drive(d1, a.path!, "a"), drive(d2, b.path!, "b")]);
  const events = await eventually("every delivery ran", async () => {
    const res = await api(d2, "GET", `/v1/sources/${listener.id}/event_summaries?limit=100&expand=event`);
    const newest = res.body.data[0]?.event;
    return newest?.n === 2 * perEmitter ? res.body.data.map((e: { event: unknown }) => e.event) : undefined;
  });
  // Counted one by one from 1: each run saw the db the previous one left.
  assert.deepEqual(
    events.map((e: { n: number }) => e.n),
    Array.from({ length: 100 }, (_, i) => 2 * perEmitter - i),
  );
  // The lease ends on the node the placement names (docs/architecture.md, *Placement*), which takes it
  // as soon as another node gives it; from then on the other nodes leave its deliveries to it (a
  // delivery they had claimed already takes it back for its run, and the placement returns it).
  const listed = (await api(d1, "GET", "/v1/admin/nodes")).body.data as Array<{ id: string; state: string }>;
  const owner = ownerOf(
    listener.id,
    listed.filter((n) => n.state === "live").map((n) => n.id),
  );
  await eventually("the lease on the listener's owner", async () =>
    (await lease(listener.id))?.node === owner ? true : undefined,
  );
});
