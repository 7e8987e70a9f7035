/**
 * Hits go to the node that runs their source (domain/cluster/hit-forwarding.ts): three Fount processes on one
 * PostgreSQL schema. A hit through a node that does not run the source is answered by the node that
 * does, exactly as if sent there; only a node with the cluster's key may open a forwarding
 * connection, and what crosses it is encrypted; a node sent a hit of a source it does not run says so instead of running it; when the node running a source is killed, the others run its hits themselves, and a hit
 * cut off by that death gets 503.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import http from "node:http";
import net from "node:net";
import { after, before, test } from "node:test";
import { adminKey, freePort } from "../helpers.ts";
import { clusterPsk, forwardRaw, openForwarding } from "./forwarding-wire.ts";
import {
  allForwardable,
  api,
  type Cluster,
  deployOwnedBy,
  echoCode,
  eventually,
  metric,
  type Node,
  startCluster,
} from "./nodes.ts";

let cluster: Cluster;
before(async () => {
  // A free account's day holds 6 invocations (the test of a quota below).
  cluster = await startCluster(["f1", "f2", "f3"], { FOUNT_FREE_DAILY_INVOCATIONS: "6" });
  // A node forwards to the others once its heartbeat has read their URLs (within a second).
  await allForwardable(cluster);
});
after(async () => {
  await cluster?.stop();
});

const node = (name: string): Node => cluster.node(name);

async function hit(n: Node, path: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${n.endpoints}${path}/sub/path?x=1&y=two`, {
    method: "PUT",
    headers: { "content-type": "text/plain", "x-caller": "test", ...headers },
    body: "line one\nline two",
  });
  return { status: res.status, headers: res.headers, body: JSON.parse(await res.text()) };
}

test("a hit through a node that does not run the source is answered by the one that does", async () => {
  const source = await deployOwnedBy(node("f1"), "f2", echoCode);
  // The first hit makes f2, the node the placement names, the node that runs the source.
  const first = await hit(node("f2"), source.path);
  assert.equal(first.status, 201);
  const direct = first.headers.getSetCookie();
  // A component's answer sets no cookie of Fount's, forwarded or not, and (endpoints on the console's
  // host name) its cookies are kept to the endpoint's path.
  assert.deepEqual(direct, [`a=1; Path=${source.path}`, `b=2; Path=${source.path}`]);
  const forwardsBefore = await metric(node("f1"), "fount_endpoint_forwards_total");
  const hitsBefore = await metric(node("f2"), "fount_endpoint_hits_total", 'status="201"');

  for (const through of ["f1", "f3", "f1", "f3"]) {
    const { status, headers, body } = await hit(node(through), source.path, {
      cookie: "fount_session=the-admins; theirs=1",
      authorization: `Bearer ${adminKey}`,
    });
    assert.equal(status, 201);
    assert.equal(headers.get("x-echo"), "yes");
    assert.deepEqual(headers.getSetCookie(), direct);
    assert.match(headers.get("x-request-id") ?? "", /^[\w-]+$/);
    assert.equal(body.method, "PUT");
    assert.equal(body.path, "/sub/path");
    assert.deepEqual(body.query, { x: "1", y: "two" });
    assert.equal(body.body, "line one\nline two");
    assert.equal(body.headers["x-caller"], "test");
    assert.equal(body.headers["content-type"], "text/plain");
    // The caller's own Host, not the address of the node that ran it.
    assert.equal(body.headers.host, new URL(node(through).endpoints).host);
    // Fount's cookies and keys never reach the node that runs it, nor the component; other ones do.
    assert.equal(body.headers.cookie, "theirs=1");
    assert.equal(body.headers.authorization, undefined);
  }
  // Every run saw the count the previous one left: one node ran them all, in turn.
  const last = await hit(node("f3"), source.path);
  assert.equal(last.body.n, 6);
  assert.equal(await metric(node("f2"), "fount_endpoint_hits_total", 'status="201"'), hitsBefore + 5);
  assert.ok((await metric(node("f1"), "fount_endpoint_forwards_total")) >= forwardsBefore + 2);
  assert.ok((await metric(node("f3"), "fount_endpoint_forwards_total", 'status="201"')) >= 3);
});

/** The status of an upgrade request to `url` with `headers` (101 when the node switched protocols). */
function upgradeStatus(url: URL, headers: Record<string, string>): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    const req = http.request(url, { headers: { connection: "Upgrade", ...headers } });
    req.once("response", (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.once("upgrade", (res, socket) => {
      socket.destroy();
      resolve(res.statusCode ?? 0);
    });
    req.once("error", reject);
    req.end();
  });
}

test("a forwarding connection needs the cluster's key: a caller cannot pass for a node", async () => {
  const url = new URL("/_fount/forward", node("f1").url);
  // The first version of the protocol (a token in a header, then lines in clear) is refused, as is the
  // second (lines of JSON in TLS: a node of that version is sent nothing, and runs its hits itself) and any other.
  assert.equal(await upgradeStatus(url, { upgrade: "fount-forward/1", "x-fount-node-auth": "guess" }), 400);
  assert.equal(await upgradeStatus(url, { upgrade: "fount-forward/2" }), 400);
  assert.equal(await upgradeStatus(url, { upgrade: "websocket" }), 400);
  // The upgrade itself proves nothing: the TLS handshake fails without the key.
  await assert.rejects(openForwarding(node("f1"), randomBytes(32)));
  const opened = await openForwarding(node("f1"), clusterPsk(cluster));
  opened.destroy();
  // Elsewhere, a request asking for an upgrade (curl --http2 sends `Upgrade: h2c`) is a plain request.
  const plain = await new Promise<number>((resolve, reject) => {
    const req = http.request(new URL("/v1/users/me", node("f1").url), {
      headers: { connection: "Upgrade", upgrade: "h2c", authorization: `Bearer ${adminKey}` },
    });
    req.once("response", (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.once("error", reject);
    req.end();
  });
  assert.equal(plain, 200);
  // A plain request there is an unknown API path.
  assert.equal((await fetch(url)).status, 404);
});

/**
 * A frame as the protocol's version 3 lays it out, written here by hand so that the test pins the bytes
 * a node of another build must send: the lengths of the metadata and the body (unsigned 32-bit
 * big-endian), the metadata's JSON, the body.
 */
function frame(meta: object, body: Buffer): Buffer {
  const json = Buffer.from(JSON.stringify(meta));
  const header = Buffer.alloc(8);
  header.writeUInt32BE(json.length, 0);
  header.writeUInt32BE(body.length, 4);
  return Buffer.concat([header, json, body]);
}

test("what one node sends another crosses the network encrypted", async () => {
  // f5 gives the others a proxy's address as its FOUNT_NODE_URL; the proxy keeps every byte both ways.
  const port = await freePort();
  const wire: Buffer[] = [];
  const proxy = net.createServer((from) => {
    const to = net.connect(port, "127.0.0.1");
    from.on("data", (d: Buffer) => wire.push(d));
    to.on("data", (d: Buffer) => wire.push(d));
    from.pipe(to).pipe(from);
    from.on("error", () => to.destroy());
    to.on("error", () => from.destroy());
  });
  await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
  const proxyUrl = `http://127.0.0.1:${(proxy.address() as net.AddressInfo).port}`;
  const f5 = await cluster.start("f5", {
    PORT: String(port),
    FOUNT_ENDPOINT_PORT: "0",
    FOUNT_NODE_URL: proxyUrl,
  });
  try {
    await eventually("f2 knows where f5 listens", async () =>
      (await metric(node("f2"), "fount_cluster_peers", 'state="forwardable"')) === 3 ? true : undefined,
    );
    const source = await deployOwnedBy(f5, "f5", echoCode);
    assert.equal((await hit(f5, source.path)).body.n, 1);
    const forwards = await metric(node("f2"), "fount_endpoint_forwards_total", 'status="201"');
    const marker = `marker-${randomBytes(8).toString("hex")}`;
    const forwarded = await hit(node("f2"), source.path, { "x-marker": marker });
    assert.equal(forwarded.status, 201);
    assert.equal(forwarded.body.n, 2, "f5 ran it");
    assert.equal(forwarded.body.headers["x-marker"], marker);
    assert.equal(
      await metric(node("f2"), "fount_endpoint_forwards_total", 'status="201"'),
      forwards + 1,
      "f2 sent it on",
    );
    const seen = Buffer.concat(wire);
    assert.ok(seen.includes("fount-forward/3"), "the hit went through the proxy");
    for (const plain of [marker, "line one", "x-caller"])
      assert.equal(seen.includes(plain), false, `${plain} crossed in clear`);
  } finally {
    process.kill(await f5.proc.serverPid(), "SIGTERM");
    await f5.proc.exited;
    cluster.nodes = cluster.nodes.filter((n) => n !== f5);
    proxy.close();
  }
});

test("a node sent a hit of a source it does not run answers that it runs elsewhere, and does not run it", async () => {
  const source = await deployOwnedBy(node("f1"), "f1", echoCode);
  assert.equal((await hit(node("f1"), source.path)).body.n, 1);
  const hitsBefore = await metric(node("f2"), "fount_endpoint_hits_total");
  // As a node would that still took f2 for the node running the source (its lease moved meanwhile).
  const hitFrame = frame(
    {
      i: 7,
      m: "POST",
      u: `${source.path}?from=raw`,
      h: { host: "example.test", "content-type": "text/plain" },
    },
    Buffer.from("hello"),
  );
  const { frames } = await forwardRaw(node("f2"), clusterPsk(cluster), hitFrame, 1);
  assert.deepEqual(frames, [{ i: 7, r: true }]);
  // f2 did not run it, nor take the source over: the next run on f1 sees the first one's count.
  assert.equal(await metric(node("f2"), "fount_endpoint_hits_total"), hitsBefore);
  assert.equal((await hit(node("f1"), source.path)).body.n, 2);
  // Bytes that are not a frame end the connection, unanswered: text read as a header announces a frame
  // past the limit, and so does a header that does; a frame whose metadata is not JSON is refused too.
  const tooLarge = Buffer.alloc(8);
  tooLarge.writeUInt32BE(3 * 1024 * 1024, 4);
  const notJson = Buffer.concat([Buffer.from([0, 0, 0, 2, 0, 0, 0, 0]), Buffer.from("{{")]);
  for (const bytes of [Buffer.from("not a frame\n"), tooLarge, notJson]) {
    const broken = await forwardRaw(node("f2"), clusterPsk(cluster), bytes, 1);
    assert.deepEqual(broken, { frames: [], ended: true });
  }
});

test("hits waiting on a node that gives the source away go after it, and it does not take the source back for them", async () => {
  const { id, path } = await deployOwnedBy(node("f1"), "f1", echoCode);
  const post = (n: Node, query = "") => fetch(`${n.endpoints}${path}${query}`, { method: "POST" });
  assert.equal((await post(node("f1"))).status, 201, "f1 runs the source");
  // A slow run on f1; meanwhile a manual run through f2 asks f1 for the source.
  const slow = post(node("f1"), "?wait=5000");
  await new Promise((r) => setTimeout(r, 300));
  const manual = api(node("f2"), "POST", `/v1/sources/${id}/run`, { event: { manual: true } });
  // Long enough for f2's request to reach f1 on a loaded machine (at load 27, 500 ms was not: f1 had
  // not been asked yet, and ran the hits below itself).
  await new Promise((r) => setTimeout(r, 1_500));
  // Hits reaching f1 now would wait for the lease f1 promised to f2: they go to f2 instead.
  const forwardsBefore = await metric(node("f1"), "fount_endpoint_forwards_total");
  const queued = await Promise.all([post(node("f1")), post(node("f1")), post(node("f1"))]);
  const answers = await Promise.all(
    [await slow, ...queued].map(async (r) => ({
      status: r.status,
      n: ((await r.json()) as { n: number }).n,
    })),
  );
  assert.equal((await manual).status, 200);
  assert.deepEqual(
    answers.map((a) => a.status),
    [201, 201, 201, 201],
  );
  // Every run saw its predecessor's count: the slow one 2, then the manual run and the three hits 3 to 6
  // in some order, and the next hit 7.
  assert.equal(answers[0]!.n, 2);
  const hits = answers.slice(1).map((a) => a.n);
  assert.equal(new Set(hits).size, 3, JSON.stringify(hits));
  assert.ok(
    hits.every((n) => n >= 3 && n <= 6),
    JSON.stringify(hits),
  );
  assert.equal(((await (await post(node("f3"))).json()) as { n: number }).n, 7);
  assert.equal(await metric(node("f1"), "fount_endpoint_forwards_total"), forwardsBefore + 3);
  // f1 did not take the source back for the hits it had: they went to f2 (the forwards above). The
  // placement gives it back to f1, its owner, once f2 has held it a while: not counted here.
});

test("hits sent on to the node a source moved to count in its owner's daily quota once, where they run", async () => {
  const made = await api(node("f1"), "POST", "/v1/admin/users", {
    username: `free-${process.pid}`,
    email: `free-${process.pid}@example.com`,
    plan: "free",
  });
  assert.equal(made.status, 200, JSON.stringify(made.body));
  const key = made.body.data.api_key as string;
  const { id, path } = await deployOwnedBy(node("f1"), "f1", echoCode, key);
  const post = (n: Node, query = "") => fetch(`${n.endpoints}${path}${query}`, { method: "POST" });
  // As in the test above: three hits reach f1 while it gives the source to f2 for a manual run, and
  // go after it. Six invocations in all, the day's quota: none may find it used up by a count taken
  // on f1 for a hit that then ran on f2.
  assert.equal((await post(node("f1"))).status, 201);
  const slow = post(node("f1"), "?wait=3000");
  await new Promise((r) => setTimeout(r, 300));
  const manual = api(node("f2"), "POST", `/v1/sources/${id}/run`, { event: { manual: true } }, key);
  await new Promise((r) => setTimeout(r, 1_500));
  const queuing = Promise.all([post(node("f1")), post(node("f1")), post(node("f1"))]);
  // While the three wait on f1 (behind the slow hit, then the lease's move), none counts yet: counted
  // on arrival at f1, they made the day look used up here (6) for a second or more.
  await new Promise((r) => setTimeout(r, 500));
  const meanwhile = await api(node("f3"), "GET", "/v1/users/me", undefined, key);
  assert.ok(meanwhile.body.data.daily_invocations_used <= 3, JSON.stringify(meanwhile.body.data));
  const queued = await queuing;
  assert.deepEqual([(await slow).status, ...queued.map((r) => r.status)], [201, 201, 201, 201]);
  assert.equal((await manual).status, 200);
  const me = await api(node("f3"), "GET", "/v1/users/me", undefined, key);
  assert.equal(me.body.data.daily_invocations_used, 6);
  assert.equal((await post(node("f3"))).status, 429, "the seventh finds the day used up");
});

test("when the node running a source is killed, the others run its hits", async () => {
  const source = await deployOwnedBy(node("f1"), "f3", echoCode);
  await hit(node("f3"), source.path);
  assert.equal((await hit(node("f2"), source.path)).body.n, 2);
  await node("f3").proc.kill();
  // f2 cannot connect to f3: it runs the hit itself, once f3's lease has expired with its heartbeat.
  const started = Date.now();
  let after = await hit(node("f2"), source.path);
  // f2 no longer writes a hit to a connection whose end it has read (peer-link.ts), but one sent in the
  // moment before the end arrives goes out on it and gets the answer of a hit cut off (503
  // node_unreachable, retry after 1 s; the next test): its caller retries. Seen once in CI; nothing ran
  // it, so the retry is still the source's third run.
  if (after.status === 503) {
    assert.equal(after.body.code, "node_unreachable");
    assert.equal(after.headers.get("retry-after"), "1");
    after = await hit(node("f2"), source.path);
  }
  assert.equal(after.status, 201);
  assert.equal(after.body.n, 3);
  assert.ok(Date.now() - started < 20_000, `answered after ${Date.now() - started} ms`);
  // And f1 then sends its hits to f2, which runs the source now.
  const next = await eventually("f1's hit runs", async () => {
    const r = await hit(node("f1"), source.path);
    return r.status === 201 ? r : undefined;
  });
  assert.equal(next.body.n, 4);
});

test("a forwarded hit cut off by the death of the node running it gets 503 node_unreachable", async () => {
  const slowCode = `export default {
    name: "Slow",
    key: "cluster-slow",
    version: "0.0.1",
    type: "source",
    props: { http: { type: "$.interface.http" } },
    async run(event) {
      await new Promise((r) => setTimeout(r, Number(event.query.wait ?? 0)));
      this.$emit({ at: Date.now() });
    },
  };`;
  const f4 = await cluster.start("f4");
  // f1 sends hits to f4 once its heartbeat has read f4's URL. f3, killed above, may still count as live
  // there (its last heartbeat under 5 s old): the count of two is f2 and f4 only once f3 is dead in the
  // store and f1 has read the live nodes since (every second).
  await eventually("f3 dead in the store", async () => {
    const listed = (await api(node("f1"), "GET", "/v1/admin/nodes")).body.data as Array<{
      id: string;
      state: string;
    }>;
    return listed.some((n) => n.id.startsWith("f3/") && n.state === "dead") ? true : undefined;
  });
  await new Promise((r) => setTimeout(r, 1_500));
  await eventually("f1 knows where f4 listens", async () => {
    const live = await metric(node("f1"), "fount_cluster_peers", 'state="live"');
    const forwardable = await metric(node("f1"), "fount_cluster_peers", 'state="forwardable"');
    return live === 2 && forwardable === 2 ? true : undefined;
  });
  const { path } = await deployOwnedBy(f4, "f4", slowCode);
  assert.equal((await fetch(`${f4.endpoints}${path}`, { method: "POST" })).status, 200);
  const before = await metric(node("f1"), "fount_endpoint_forwards_total");
  assert.equal((await fetch(`${node("f1").endpoints}${path}`, { method: "POST" })).status, 200);
  assert.equal(await metric(node("f1"), "fount_endpoint_forwards_total"), before + 1);
  const cutOff = fetch(`${node("f1").endpoints}${path}?wait=5000`, { method: "POST" });
  await new Promise((r) => setTimeout(r, 1_000));
  await f4.proc.kill();
  const answer = await cutOff;
  assert.equal(answer.status, 503);
  assert.equal(answer.headers.get("retry-after"), "1");
  assert.equal(((await answer.json()) as { code: string }).code, "node_unreachable");
});

test("a node that shuts down hands its sources back: hits sent on to it keep being answered", async () => {
  const source = await deployOwnedBy(node("f1"), "f1", echoCode);
  assert.equal((await hit(node("f1"), source.path)).body.n, 1);
  const before = await metric(node("f2"), "fount_endpoint_forwards_total");
  assert.equal((await hit(node("f2"), source.path)).body.n, 2);
  assert.equal(await metric(node("f2"), "fount_endpoint_forwards_total"), before + 1);

  // Five clients hit through f2 while f1, which runs the source, stops (SIGTERM).
  const seen: number[] = [];
  const failures: string[] = [];
  let running = true;
  const clients = Array.from({ length: 5 }, async () => {
    while (running) {
      const res = await hit(node("f2"), source.path);
      if (res.status === 201) seen.push(res.body.n);
      else failures.push(`${res.status} ${JSON.stringify(res.body)}`);
    }
  });
  await new Promise((r) => setTimeout(r, 500));
  const f1 = node("f1");
  process.kill(await f1.proc.serverPid(), "SIGTERM");
  assert.equal((await f1.proc.exited).code, 0, f1.proc.output());
  await new Promise((r) => setTimeout(r, 500));
  running = false;
  await Promise.all(clients);
  assert.deepEqual(failures, []);
  // Every run saw the db its predecessor left, on f1 and then on f2: no count twice, none skipped.
  seen.sort((a, b) => a - b);
  assert.deepEqual(
    seen,
    Array.from({ length: seen.length }, (_, k) => k + 3),
  );
});
