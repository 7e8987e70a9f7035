/**
 * `fount admin nodes` on a cluster (three Fount processes on one PostgreSQL schema): the operator sees
 * every node, live or dead, where the others reach it, and how many sources it runs. And a node whose
 * FOUNT_NODE_ID a running node has refuses to start, while a node restarted after a crash does not.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { ownerOf } from "../../src/domain/cluster/placement.ts";
import type { NodeView } from "../../src/domain/cluster/source-leases.ts";
import { fount } from "../cli/run.ts";
import { startProcess } from "../process/server-process.ts";
import { api, type Cluster, eventually, startCluster } from "./nodes.ts";

let cluster: Cluster;
before(async () => {
  cluster = await startCluster(["m1", "m2", "m3"]);
});
after(async () => {
  await cluster?.stop();
});

/** An entry of `fount admin nodes --json`. */
type Listed = NodeView;

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
  const nodes = await entries();
  // Taken after the listing: nodes beat on while a loaded machine runs the CLI (once 50 s).
  const now = Date.now() / 1000;
  assert.deepEqual([...nodes.keys()].sort(), ["m1", "m2", "m3"]);
  for (const [name, n] of nodes) {
    assert.equal(n.state, "live", name);
    assert.equal(n.url, cluster.node(name).url, "the address the others forward hits to");
    assert.ok(n.started_at <= n.heartbeat_at && n.heartbeat_at <= now + 5, JSON.stringify(n));
    assert.equal(n.sources, 0);
  }
  // A source hit through m2 runs on the node the placement names for it (docs/architecture.md,
  // *Placement*): that node holds its run lease.
  const res = await api(cluster.node("m1"), "POST", "/v1/sources", {
    component_code: `export default { name: "E", version: "0.0.1", props: { http: "$.interface.http" }, run(event) { this.$emit(event.body); } };`,
  });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  const sourceId = res.body.data.id as string;
  const owner = ownerOf(
    sourceId,
    [...nodes.values()].map((n) => n.id),
  )!;
  const runner = owner.slice(0, owner.indexOf("/"));
  // One hit through m2, then only looks: hits kept coming through m2 would make the lease follow them
  // there (docs/architecture.md, *Leases follow their hits*), which a loaded machine's slow looks once
  // let happen. A node that started a moment ago and does not know m3 yet runs the hit itself, and the
  // placement gives the lease to its owner a few seconds later.
  const hit = await fetch(`${cluster.node("m2").endpoints}${new URL(res.body.data.endpoint_url).pathname}`, {
    method: "POST",
  });
  assert.equal(hit.status, 200);
  const after = await eventually(`the source runs on ${runner}`, async () => {
    const listed = await entries();
    return [...listed].every(([name, n]) => n.sources === (name === runner ? 1 : 0)) ? listed : undefined;
  });
  // Any node's admin API lists the same nodes, marking itself.
  for (const name of ["m1", "m3"]) {
    const res = await api(cluster.node(name), "GET", "/v1/admin/nodes");
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const byName = new Map<string, Listed & { self: boolean }>(
      res.body.data.map((n: Listed & { self: boolean }) => [n.id.slice(0, n.id.indexOf("/")), n]),
    );
    assert.deepEqual([...byName.keys()].sort(), ["m1", "m2", "m3"]);
    for (const [other, n] of byName) {
      assert.equal(n.self, other === name, `${name} answering: ${JSON.stringify(n)}`);
      assert.equal(n.id, after.get(other)?.id);
      assert.equal(n.state, "live");
      assert.equal(n.url, cluster.node(other).url);
      assert.equal(n.sources, other === runner ? 1 : 0);
    }
  }
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
  const seen = await api(cluster.node("m1"), "GET", "/v1/admin/nodes");
  assert.equal(
    seen.body.data.find((n: Listed) => n.id === dead.id)?.state,
    "dead",
    "the admin API of a live node lists it dead too",
  );
  const m1 = cluster.node("m1");
  process.kill(await m1.proc.serverPid(), "SIGTERM");
  assert.equal((await m1.proc.exited).code, 0, m1.proc.output());
  const left = await entries();
  assert.equal(left.has("m1"), false);
  assert.deepEqual([...left.keys()].sort(), ["m2", "m3"]);
});

test("a node whose FOUNT_NODE_ID a running node has refuses to start; the same node restarted after a kill starts", async () => {
  // m2 runs (m3 was killed and m1 stopped above).
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-twin-"));
  try {
    const twin = startProcess({
      PORT: "0",
      HOST: "127.0.0.1",
      DATABASE_URL: cluster.databaseUrl,
      FOUNT_DATA_DIR: dataDir,
      FOUNT_NODE_ID: "m2",
      FOUNT_ENCRYPTION_KEY: cluster.encryptionKey,
      LOG_LEVEL: "warn",
    });
    // A start that is not refused would run on: given 30 s to end, then killed.
    let timer: NodeJS.Timeout | undefined;
    const ended = await Promise.race([
      twin.exited,
      new Promise<undefined>((r) => {
        timer = setTimeout(() => r(undefined), 30_000);
      }),
    ]);
    clearTimeout(timer);
    if (ended === undefined) {
      await twin.kill();
      assert.fail(`a second m2 started: ${twin.output()}`);
    }
    assert.equal(ended.code, 1, twin.output());
    const lines = twin.output().trim().split("\n");
    assert.equal(lines.length, 1, twin.output());
    assert.match(
      lines[0]!,
      /^fount: another running node uses FOUNT_NODE_ID=m2 \(http:\/\/127\.0\.0\.1:\d+\): give each node an ID of its own$/,
    );
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
  assert.equal((await entries()).get("m2")?.state, "live", "the running m2 is untouched");
  // m2 killed and started again at once, before its old heartbeat goes stale: the start watches that
  // heartbeat, sees it stand still, and goes on.
  const killed = (await entries()).get("m2")!.id;
  await cluster.node("m2").proc.kill();
  const m2 = await cluster.start("m2");
  assert.equal((await api(m2, "GET", "/v1/users/me")).status, 200);
  const res = await listed("--json");
  const m2s = (JSON.parse(res.stdout) as Listed[]).filter((n) => n.id.startsWith("m2/"));
  assert.equal(m2s.length, 2, `the killed process and the new one: ${JSON.stringify(m2s)}`);
  const old = m2s.find((n) => n.id === killed);
  assert.ok(old && old.heartbeat_age_ms >= 2_500, `watched 2.5 s before starting: ${JSON.stringify(m2s)}`);
});
