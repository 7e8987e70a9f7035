/**
 * `fount admin nodes` on a cluster (three Fount processes on one PostgreSQL schema): the operator sees
 * every node, live or dead, where the others reach it, and how many sources it runs.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { fount } from "../cli/run.ts";
import { api, type Cluster, eventually, startCluster } from "./nodes.ts";

let cluster: Cluster;
before(async () => {
  cluster = await startCluster(["m1", "m2", "m3"]);
});
after(async () => {
  await cluster?.stop();
});

interface Listed {
  id: string;
  state: "live" | "dead";
  url: string | null;
  started_at: number;
  heartbeat_at: number;
  heartbeat_age_ms: number;
  sources: number;
}

async function listed(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return fount(["admin", "nodes", ...args], { DATABASE_URL: cluster.databaseUrl });
}

/** The listed entry of node `name` (its ID is the name and a suffix of the process's own). */
async function entries(): Promise<Map<string, Listed>> {
  const res = await listed("--json");
  assert.equal(res.code, 0, res.stderr);
  const list = JSON.parse(res.stdout) as Listed[];
  return new Map(list.map((n) => [n.id.slice(0, n.id.indexOf("/")), n]));
}

test("admin nodes lists every node with its state, address and the sources it runs", async () => {
  const now = Date.now() / 1000;
  const nodes = await entries();
  assert.deepEqual([...nodes.keys()].sort(), ["m1", "m2", "m3"]);
  for (const [name, n] of nodes) {
    assert.equal(n.state, "live", name);
    assert.equal(n.url, cluster.node(name).url, "the address the others forward hits to");
    assert.ok(n.started_at <= n.heartbeat_at && n.heartbeat_at <= now + 5, JSON.stringify(n));
    assert.equal(n.sources, 0);
  }
  // A source hit through m2 runs there: m2 holds its run lease.
  const res = await api(cluster.node("m1"), "POST", "/v1/sources", {
    component_code: `export default { name: "E", version: "0.0.1", props: { http: "$.interface.http" }, run(event) { this.$emit(event.body); } };`,
  });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  const hit = await fetch(`${cluster.node("m2").url}${new URL(res.body.data.endpoint_url).pathname}`, {
    method: "POST",
  });
  assert.equal(hit.status, 200);
  const after = await entries();
  assert.equal(after.get("m2")?.sources, 1);
  assert.equal(after.get("m1")?.sources, 0);
  // The table names the same nodes, for a person.
  const text = await listed();
  assert.equal(text.code, 0, text.stderr);
  assert.match(text.stdout, /NODE +│ STATE +│ ADDRESS +│ STARTED +│ HEARTBEAT +│ SOURCES/);
  for (const name of ["m1", "m2", "m3"]) assert.match(text.stdout, new RegExp(`│ ${name}/\\S+ +│ live `));
});

test("a killed node is listed dead once its heartbeat is 5 s old; a node that stops cleanly leaves", async () => {
  await cluster.node("m3").proc.kill();
  const dead = await eventually("m3 listed dead", async () => {
    const n = (await entries()).get("m3");
    return n?.state === "dead" ? n : undefined;
  });
  assert.ok(dead.heartbeat_age_ms >= 5_000, JSON.stringify(dead));
  assert.equal((await entries()).get("m1")?.state, "live");
  const m1 = cluster.node("m1");
  process.kill(await m1.proc.serverPid(), "SIGTERM");
  assert.equal((await m1.proc.exited).code, 0, m1.proc.output());
  const left = await entries();
  assert.equal(left.has("m1"), false);
  assert.deepEqual([...left.keys()].sort(), ["m2", "m3"]);
});
