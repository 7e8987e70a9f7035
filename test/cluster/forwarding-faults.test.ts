/**
 * What one tenant's hit, or one node's bad frame, may do to the forwarding line between two nodes: no
 * more than fail itself. A frame that is not a hit ends its connection (the node logs why) and leaves the
 * node answering; an answer too large to relay comes back as an error saying so, and the other hits on
 * the same connection, of other tenants, are answered as usual.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { encodeFrame } from "../../src/domain/cluster/forwarding-protocol.ts";
import { clusterPsk, forwardRaw } from "./forwarding-wire.ts";
import {
  allForwardable,
  api,
  type Cluster,
  deployOwnedBy,
  echoCode,
  metric,
  type Node,
  startCluster,
} from "./nodes.ts";

let cluster: Cluster;
before(async () => {
  cluster = await startCluster(["m1", "m2"]);
  // A node forwards to the other once its heartbeat has read the other's URL (within a second).
  await allForwardable(cluster);
});
after(async () => {
  await cluster?.stop();
});

const node = (name: string): Node => cluster.node(name);

/** A frame as the protocol lays it out, whatever its metadata. */
const frameOf = (meta: object, body: string | null) => encodeFrame(meta as never, body);

test("a frame that is not a hit ends its connection, and the node goes on answering", async () => {
  const { path } = await deployOwnedBy(node("m1"), "m1", echoCode);
  assert.equal((await fetch(`${node("m1").endpoints}${path}`, { method: "POST" })).status, 201);
  const psk = clusterPsk(cluster);
  const good = { i: 9, m: "POST", u: path, h: { "x-request-id": "good-one" } };
  const bad: Array<[object, string | null]> = [
    [{ i: 1 }, ""],
    [{ bye: true }, null],
    [{ i: 2, m: "POST", u: path, h: null }, ""],
    [{ i: 3, m: "POST", u: path, h: { "x-caller": 5 } }, ""],
    [{ i: 4, m: "POST", u: path, h: [] }, ""],
    [{ i: "5", m: "POST", u: path, h: {} }, ""],
    [{ i: 6, m: 7, u: path, h: {} }, ""],
    [{ i: 7, m: "POST", u: "/v1/users/me", h: {} }, ""],
    [{ i: 8, m: "POST", u: path, h: {} }, null],
  ];
  for (const [meta, body] of bad) {
    // A good hit behind the bad frame, in the same write: not run, the connection is given up.
    const bytes = Buffer.concat([frameOf(meta, body), frameOf(good, "")]);
    const broken = await forwardRaw(node("m1"), psk, bytes, 1);
    assert.deepEqual(broken, { frames: [], ended: true }, JSON.stringify(meta));
  }
  // The node is up: a hit on a connection of its own is answered, and so is one sent on by the other node.
  const { frames } = await forwardRaw(node("m1"), psk, frameOf(good, "hello"), 1);
  assert.deepEqual(
    frames.map((f) => (f as { i: number; s: number }).s),
    [201],
  );
  const forwards = await metric(node("m2"), "fount_endpoint_forwards_total", 'status="201"');
  assert.equal((await fetch(`${node("m2").endpoints}${path}`, { method: "POST" })).status, 201);
  assert.equal(await metric(node("m2"), "fount_endpoint_forwards_total", 'status="201"'), forwards + 1);
  assert.match(
    node("m1").proc.output(),
    /closed a forwarding connection: it sent a hit frame without a number/,
  );
});

/** Answers `?mb=` megabytes of text. */
const bigCode = `export default {
  name: "Big",
  key: "cluster-big",
  version: "0.0.1",
  type: "source",
  props: { http: { type: "$.interface.http", customResponse: true } },
  async run(event) {
    this.http.respond({ status: 200, body: "x".repeat(Number(event.query.mb) * 1024 * 1024) });
  },
};`;

test("an answer too large to relay comes back as an error, and other tenants' hits on the link are answered", async () => {
  const made = await api(node("m1"), "POST", "/v1/admin/users", {
    username: `other-${process.pid}`,
    email: `other-${process.pid}@example.com`,
  });
  assert.equal(made.status, 200, JSON.stringify(made.body));
  const echo = await deployOwnedBy(node("m1"), "m1", echoCode, made.body.data.api_key as string);
  const big = await deployOwnedBy(node("m1"), "m1", bigCode);
  const post = (n: Node, path: string, query = "") =>
    fetch(`${n.endpoints}${path}${query}`, { method: "POST" });
  // Both run on m1; a 3 MB answer is given whole to a caller of m1 itself.
  assert.equal((await post(node("m1"), echo.path)).status, 201);
  const direct = await post(node("m1"), big.path, "?mb=3");
  assert.equal(direct.status, 200);
  assert.equal((await direct.text()).length, 3 * 1024 * 1024);

  // Through m2, on its one connection to m1: the other tenant's slow hits are on it when the large
  // answer comes back (before, that answer's frame ended the connection, and they got 503).
  const slow = Array.from({ length: 3 }, () => post(node("m2"), echo.path, "?wait=2000"));
  await new Promise((r) => setTimeout(r, 500));
  const tooLarge = await post(node("m2"), big.path, "?mb=3");
  for (const answer of await Promise.all(slow)) assert.equal(answer.status, 201, await answer.text());
  const body = (await tooLarge.json()) as { code: string; error: string; details: Record<string, unknown> };
  assert.equal(tooLarge.status, 500, JSON.stringify(body));
  assert.equal(body.code, "component_error");
  assert.match(body.error, /too large to relay/);
  assert.equal(body.details.reason, "answer_too_large");
  assert.equal(body.details.request_id, tooLarge.headers.get("x-request-id"));
  assert.equal(tooLarge.headers.get("content-type"), "application/json; charset=utf-8");
  // An answer that fits is relayed as before.
  const fits = await post(node("m2"), big.path, "?mb=1");
  assert.equal(fits.status, 200);
  assert.equal((await fits.text()).length, 1024 * 1024);
  assert.match(node("m1").proc.output(), /a forwarded hit's answer is too large to relay/);
});
