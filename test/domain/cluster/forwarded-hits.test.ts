/**
 * The receiving end of the forwarding line (src/domain/cluster/forwarded-hits.ts) with a real sending
 * end over the upgrade and TLS: a node whose link to it closes (its process running on) leaves no
 * connection behind here, once the hits it sent are answered.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import http from "node:http";
import type { Socket } from "node:net";
import { after, test } from "node:test";
import pino from "pino";
import { ForwardedHits } from "../../../src/domain/cluster/forwarded-hits.ts";
import { PeerLink } from "../../../src/domain/cluster/peer-link.ts";

const psk = randomBytes(32);
/** Answers each hit after `delayMs`. */
let delayMs = 0;
const forwarded = new ForwardedHits({
  psk,
  serve: async (hit) => {
    await new Promise((r) => setTimeout(r, delayMs));
    return { status: 200, headers: { "content-type": "text/plain" }, body: `ran ${hit.url}` };
  },
  logger: pino({ level: "silent" }),
});
const server = http.createServer((_req, res) => res.end());
server.on("upgrade", (req, raw: Socket, head: Buffer) => {
  if (!forwarded.accept(req, raw, head)) raw.destroy();
});
await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
after(async () => {
  await forwarded.close(1_000);
  server.close();
});

const connections = () =>
  new Promise<number>((resolve, reject) =>
    server.getConnections((err, n) => (err ? reject(err) : resolve(n))),
  );

/** Waits until the server holds `n` connections, failing after `ms`. */
async function connectionsReach(n: number, ms: number): Promise<void> {
  const end = Date.now() + ms;
  for (let now = await connections(); now !== n; now = await connections()) {
    assert.ok(Date.now() < end, `${now} connections after ${ms} ms, expected ${n}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const hit = { method: "POST", url: "/e/abc", headers: { "x-request-id": "r1" }, body: Buffer.from("x") };

test("a link that closes leaves no connection open on the node it forwarded to", async () => {
  for (let round = 0; round < 3; round++) {
    const link = new PeerLink(url, psk, "node-a");
    const sent = await link.send(hit);
    assert.ok(sent.ok && sent.answer.status === 200, JSON.stringify(sent));
    await connectionsReach(1, 5_000);
    link.close();
    await connectionsReach(0, 5_000);
  }
});

test("a link that closes while a hit runs there leaves no connection open once the hit is done", async () => {
  delayMs = 300;
  try {
    const link = new PeerLink(url, psk, "node-a");
    const first = await link.send(hit);
    assert.ok(first.ok);
    // The second hit runs for 300 ms; the link ends its side meanwhile.
    const running = link.send(hit).catch(() => undefined);
    await new Promise((r) => setTimeout(r, 100));
    link.close();
    await running;
    await connectionsReach(0, 5_000);
  } finally {
    delayMs = 0;
  }
});

test("handshakes refused for a wrong key are logged once a minute, with how many, not once each", async () => {
  const lines: Array<{ msg: string; refused?: number }> = [];
  const logged = new ForwardedHits({
    psk,
    serve: async () => ({ status: 200, headers: {}, body: "" }),
    logger: pino({ level: "warn" }, { write: (line: string) => void lines.push(JSON.parse(line)) }),
  });
  const other = http.createServer((_req, res) => res.end());
  other.on("upgrade", (req, raw: Socket, head: Buffer) => {
    if (!logged.accept(req, raw, head)) raw.destroy();
  });
  await new Promise<void>((resolve) => other.listen(0, "127.0.0.1", resolve));
  try {
    const at = `http://127.0.0.1:${(other.address() as { port: number }).port}`;
    for (let n = 0; n < 5; n++) {
      const link = new PeerLink(at, randomBytes(32), "stranger");
      assert.equal((await link.send(hit)).ok, false);
      link.close();
    }
    const refused = lines.filter((l) => l.msg.startsWith("refused a forwarding connection"));
    assert.equal(refused.length, 1, JSON.stringify(lines));
    assert.equal(refused[0]!.refused, 1, "the first is logged as it comes");
  } finally {
    await logged.close(1_000);
    other.close();
  }
});
