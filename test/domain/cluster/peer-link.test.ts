/**
 * The sending end of the forwarding line (src/domain/cluster/peer-link.ts) against a node that answers
 * with bytes this test chooses, over the real upgrade and TLS: a binary body comes back byte for byte,
 * and an answer cut off by the end of the connection, or a frame past the limit, fails the hit as a
 * cut connection does (503 node_unreachable: it may have run), with the reason as its cause.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import http from "node:http";
import type { Socket } from "node:net";
import { after, test } from "node:test";
import tls from "node:tls";
import {
  encodeFrame,
  FrameReader,
  type HitMeta,
  maxFrameBytes,
  pskIdentity,
  tlsOptions,
  upgradeProtocol,
} from "../../../src/domain/cluster/forwarding-protocol.ts";
import { PeerLink } from "../../../src/domain/cluster/peer-link.ts";
import { AppError } from "../../../src/errors.ts";

const psk = randomBytes(32);
/** What the node answers to the hit it reads, as bytes; then it ends the connection when `end` is set. */
let reply: (hit: HitMeta, body: Buffer) => { bytes: Buffer; end: boolean };

const server = http.createServer((_req, res) => res.end());
server.on("upgrade", (_req, raw: Socket) => {
  raw.write(`HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: ${upgradeProtocol}\r\n\r\n`);
  const socket = new tls.TLSSocket(raw, {
    ...tlsOptions,
    isServer: true,
    pskCallback: (_s: tls.TLSSocket, identity: string) => (identity === pskIdentity ? psk : null),
  } as tls.TLSSocketOptions);
  socket.on("error", () => undefined);
  // The upgraded socket keeps the HTTP server's half-open setting: this end closes when the link does.
  socket.on("end", () => socket.end());
  const reader = new FrameReader((meta, body) => {
    const { bytes, end } = reply(meta as HitMeta, body ?? Buffer.alloc(0));
    if (end) socket.end(bytes);
    else socket.write(bytes);
  });
  socket.on("data", (chunk: Buffer) => reader.push(chunk));
});
await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
after(() => server.close());

const hit = (body: Buffer) => ({ method: "POST", url: "/e/abc", headers: { "x-request-id": "r1" }, body });

/** The error a hit cut off after it went out gets, with the reason the link gave up the connection. */
async function cutOff(link: PeerLink): Promise<string> {
  const err = await link.send(hit(Buffer.from("x"))).then(
    (sent) => assert.fail(`answered: ${JSON.stringify(sent)}`),
    (e: unknown) => e,
  );
  assert.ok(err instanceof AppError);
  assert.equal(err.code, "node_unreachable");
  return (err.cause as Error).message;
}

test("a body of every byte value goes out and comes back byte for byte", async () => {
  const everyByte = Buffer.from(Array.from({ length: 70_000 }, (_, i) => (i * 7) % 256));
  reply = (meta, body) => ({
    bytes: encodeFrame({ i: meta.i, s: 201, h: { "x-seen": String(body.length) } }, body),
    end: false,
  });
  const link = new PeerLink(url, psk, "n1");
  const sent = await link.send(hit(everyByte));
  link.close();
  assert.ok(sent.ok);
  assert.equal(sent.answer.status, 201);
  assert.deepEqual(sent.answer.headers, { "x-seen": "70000" });
  assert.deepEqual(sent.answer.body, everyByte);
});

test("an answer cut off by the end of the connection fails its hit as a cut connection, saying so", async () => {
  reply = (meta) => {
    const whole = encodeFrame({ i: meta.i, s: 200, h: {} }, "the whole answer");
    return { bytes: whole.subarray(0, whole.length - 3), end: true };
  };
  const link = new PeerLink(url, psk, "n1");
  assert.equal(await cutOff(link), "the connection closed in the middle of a frame");
  link.close();
});

test("a frame past the limit ends the connection before its bytes come, and fails the hit with the reason", async () => {
  reply = () => {
    const header = Buffer.alloc(8);
    header.writeUInt32BE(maxFrameBytes + 1, 4);
    // The connection stays open: the link ends it on the header alone.
    return { bytes: header, end: false };
  };
  const link = new PeerLink(url, psk, "n1");
  assert.equal(
    await cutOff(link),
    `the other node sent a frame of ${maxFrameBytes + 1} bytes, past the limit of ${maxFrameBytes}`,
  );
  link.close();
});

test("a hit sent after the other node ended the connection does not go out on it: it runs here, never cut off", async () => {
  // The node answers the first hit and ends the connection with it, as a node killed right after its
  // answer does (its kernel closes the socket). The link reads the answer and the end in one go; the
  // second hit, sent as soon as the first is answered, must not be written to the ended connection,
  // where it would be taken for one that went out and may have run (503 node_unreachable).
  reply = (meta) => ({ bytes: encodeFrame({ i: meta.i, s: 200, h: {} }, "last"), end: true });
  for (let round = 0; round < 20; round++) {
    const link = new PeerLink(url, psk, "n1");
    const first = await link.send(hit(Buffer.from("1")));
    assert.ok(first.ok);
    const second = await link.send(hit(Buffer.from("2")));
    // Not sent (the caller runs it here), or sent on a new connection, whichever the link saw first.
    assert.ok(
      !second.ok ? second.why === "unreachable" : second.answer.status === 200,
      JSON.stringify(second),
    );
    link.close();
  }
});
