/** Fount nodes as processes on one PostgreSQL schema, for the cluster tests. */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { ownerOf } from "../../src/domain/cluster/placement.ts";
import { adminKey, unmountScratchUnder } from "../helpers.ts";
import { dropSchema, freshSchema, schemaUrl } from "../pg-schemas.ts";
import { type ServerProcess, startProcess } from "../process/server-process.ts";

export interface Node {
  name: string;
  proc: ServerProcess;
  /** The API's base URL. */
  url: string;
  /** The base URL of its endpoint listener: a source's endpoint on this node is `${endpoints}/e/<id>`. */
  endpoints: string;
  dataDir: string;
}

export interface Cluster {
  schema: string;
  databaseUrl: string;
  /** Every node's `FOUNT_ENCRYPTION_KEY` (base64). */
  encryptionKey: string;
  nodes: Node[];
  /** The running node called `name` (fails the test when there is none). */
  node(name: string): Node;
  /** Starts (or starts again) the node called `name`, with its own data dir (and `env` besides the cluster's). */
  start(name: string, env?: NodeJS.ProcessEnv): Promise<Node>;
  /** Kills every node, drops the schema and the data dirs. */
  stop(): Promise<void>;
}

/**
 * Starts nodes `names` on a fresh schema: the first alone (it creates the schema, the admin and its
 * key), then the others; with `together`, all at once on the empty schema, as a cluster's first start.
 */
export async function startCluster(
  names: string[],
  env: NodeJS.ProcessEnv = {},
  options: { together?: boolean } = {},
): Promise<Cluster> {
  const schema = freshSchema("fount_cluster");
  const databaseUrl = schemaUrl(schema);
  const dirs = new Map<string, string>();
  // Every node must open the secrets the others sealed (webhook signing secrets, secret props).
  const encryptionKey = randomBytes(32).toString("base64");
  const cluster: Cluster = {
    schema,
    databaseUrl,
    encryptionKey,
    nodes: [],
    node(name) {
      const n = cluster.nodes.find((x) => x.name === name);
      if (!n) throw new Error(`node ${name} does not run`);
      return n;
    },
    async start(name, nodeEnv = {}) {
      let dataDir = dirs.get(name);
      if (!dataDir) {
        dataDir = mkdtempSync(path.join(os.tmpdir(), `fount-${name}-`));
        dirs.set(name, dataDir);
      }
      const proc = startProcess({
        PORT: "0",
        HOST: "127.0.0.1",
        DATABASE_URL: databaseUrl,
        FOUNT_DATA_DIR: dataDir,
        FOUNT_NODE_ID: name,
        FOUNT_ENCRYPTION_KEY: encryptionKey,
        FOUNT_BOOTSTRAP_API_KEY: adminKey,
        FOUNT_WEBHOOK_ALLOW_PRIVATE: "true",
        FOUNT_EXECUTOR_ALLOW_PRIVATE: "true",
        LOG_LEVEL: "warn",
        ...env,
        ...nodeEnv,
      });
      // At LOG_LEVEL=warn the start prints only its own lines.
      const [, url, endpoints] = await proc.waitFor(
        /Fount is listening on (http:\/\/127\.0\.0\.1:\d+)[\s\S]*?Source endpoints answer on (http:\/\/127\.0\.0\.1:\d+)\/e\//,
      );
      const node = { name, proc, url: url!, endpoints: endpoints!, dataDir };
      cluster.nodes = [...cluster.nodes.filter((n) => n.name !== name), node];
      return node;
    },
    async stop() {
      await Promise.all(cluster.nodes.map((n) => n.proc.kill()));
      await dropSchema(schema);
      for (const dir of dirs.values()) {
        unmountScratchUnder(dir);
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
  try {
    if (options.together) await Promise.all(names.map((n) => cluster.start(n)));
    else {
      await cluster.start(names[0]!);
      await Promise.all(names.slice(1).map((n) => cluster.start(n)));
    }
  } catch (err) {
    await cluster.stop();
    throw err;
  }
  return cluster;
}

/** An API call to one node as the admin, or as the owner of `key`. */
export async function api(
  node: Node,
  method: string,
  route: string,
  body?: unknown,
  key = adminKey,
): Promise<{ status: number; body: any }> {
  const res = await fetch(`${node.url}${route}`, {
    method,
    headers: {
      authorization: `Bearer ${key}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = text;
  }
  return { status: res.status, body: json };
}

/** A node's value of one metric series (summed over the series whose labels include `labels`). */
export async function metric(n: Node, name: string, labels = ""): Promise<number> {
  const text = await (await fetch(`${n.url}/metrics`)).text();
  let sum = 0;
  for (const line of text.split("\n")) {
    if (line.startsWith(`${name}{`) && line.includes(labels))
      sum += Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return sum;
}

/** Waits until `check` returns a value other than undefined, or throws after `timeoutMs`. */
export async function eventually<T>(
  what: string,
  check: () => Promise<T | undefined>,
  timeoutMs = 30_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * Deploys sources through `through` until one that the placement puts on node `name` (docs/architecture.md,
 * *Placement*): a source no node runs goes to that node, so its first hit, through any node, runs there.
 */
export async function deployOwnedBy(
  through: Node,
  name: string,
  code: string,
  key?: string,
): Promise<{ id: string; path: string }> {
  const listed = (await api(through, "GET", "/v1/admin/nodes")).body.data as Array<{
    id: string;
    state: string;
    url: string | null;
  }>;
  const members = listed.filter((n) => n.state === "live" && n.url !== null).map((n) => n.id);
  for (let i = 0; i < 60; i++) {
    const res = await api(through, "POST", "/v1/sources", { component_code: code }, key);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    if (ownerOf(res.body.data.id, members)?.startsWith(`${name}/`))
      return { id: res.body.data.id, path: new URL(res.body.data.endpoint_url).pathname };
  }
  throw new Error(`no source placed on ${name} among ${members.join(", ")}`);
}

/** Answers with what its run saw, and counts its runs in `this.db` (exact only on one node at a time). */
export const echoCode = `export default {
  name: "Echo",
  key: "cluster-echo",
  version: "0.0.1",
  type: "source",
  props: { http: { type: "$.interface.http", customResponse: true }, db: "$.service.db" },
  async run(event) {
    const n = (this.db.get("n") ?? 0) + 1;
    this.db.set("n", n);
    // ?wait=ms makes the run slow.
    await new Promise((r) => setTimeout(r, Number(event.query?.wait ?? 0)));
    this.$emit({ n }, { id: String(n) });
    this.http.respond({
      status: 201,
      headers: { "x-echo": "yes", "set-cookie": ["a=1", "fount_session=theirs; Path=/", "b=2"] },
      body: JSON.stringify({ n, method: event.method, path: event.path, query: event.query, headers: event.headers, body: event.bodyRaw }),
    });
  },
};`;

/** Waits until every node of `cluster` can forward to every other (its heartbeat read their URLs). */
export async function allForwardable(cluster: Cluster): Promise<void> {
  const others = cluster.nodes.length - 1;
  for (const n of cluster.nodes) {
    await eventually(`${n.name} knows where the others listen`, async () =>
      (await metric(n, "fount_cluster_peers", 'state="forwardable"')) === others ? true : undefined,
    );
  }
}
