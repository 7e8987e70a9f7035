/**
 * The frames of the forwarding connection (src/domain/cluster/forwarding-protocol.ts): a header with the
 * lengths of the metadata and the body, the metadata as JSON, the body's bytes. TLS hands the reader
 * records of any size, so frames must come out the same however the bytes are cut; a frame past the
 * limit ends the connection before its bytes are read, and a frame cut off by the end is never delivered.
 */
import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { test } from "node:test";
import {
  encodeFrame,
  FrameReader,
  maxFrameBytes,
  readFrames,
} from "../../../src/domain/cluster/forwarding-protocol.ts";

type Frame = { meta: unknown; body: Buffer | null };

/** Every byte value, twice, so that no value is special to the reader. */
const everyByte = Buffer.from(Array.from({ length: 512 }, (_, i) => i % 256));

const hit = {
  i: 1,
  m: "POST",
  u: "/e/abc/path?x=1",
  h: { "content-type": "application/octet-stream", "x-note": "naïve ☃" },
  t: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
};
const sent: Frame[] = [
  { meta: hit, body: everyByte },
  { meta: { i: 1, s: 200, h: { "x-request-id": "r1" } }, body: Buffer.from("héllo ☃", "utf8") },
  { meta: { i: 2, s: 204, h: {} }, body: null },
  { meta: { i: 3, s: 200, h: {} }, body: Buffer.alloc(0) },
  { meta: { i: 4, r: true }, body: null },
  { meta: { bye: true }, body: null },
];
const wire = Buffer.concat(sent.map((f) => encodeFrame(f.meta as never, f.body)));

function reader(): { reader: FrameReader; frames: Frame[] } {
  const frames: Frame[] = [];
  return { reader: new FrameReader((meta, body) => frames.push({ meta, body })), frames };
}

test("a frame is its two lengths, big-endian, its metadata's JSON and its body's bytes; no body is not an empty one", () => {
  assert.deepEqual(
    encodeFrame({ i: 7, s: 201, h: {} }, "ok"),
    Buffer.concat([
      Buffer.from([0, 0, 0, 22, 0, 0, 0, 2]),
      Buffer.from('{"i":7,"s":201,"h":{}}'),
      Buffer.from("ok"),
    ]),
  );
  assert.deepEqual(
    encodeFrame({ bye: true }, null),
    Buffer.concat([Buffer.from([0, 0, 0, 12, 0xff, 0xff, 0xff, 0xff]), Buffer.from('{"bye":true}')]),
  );
  assert.deepEqual(encodeFrame({ i: 1, x: true }, Buffer.alloc(0)).subarray(4, 8), Buffer.alloc(4));
});

test("frames come out whole and in order wherever the bytes are cut in two", () => {
  for (let cut = 0; cut <= wire.length; cut++) {
    const { reader: r, frames } = reader();
    assert.equal(r.push(wire.subarray(0, cut)), undefined);
    assert.equal(r.push(wire.subarray(cut)), undefined);
    assert.deepEqual(frames, sent, `cut at byte ${cut}`);
    assert.equal(r.pending, 0);
  }
});

test("frames come out whole when the bytes come one at a time", () => {
  const { reader: r, frames } = reader();
  for (let at = 0; at < wire.length; at++) {
    assert.equal(r.push(wire.subarray(at, at + 1)), undefined);
    // A frame is delivered the moment its last byte comes, not before.
    const whole = sent.filter((_, k) => encodedUpTo(k) <= at + 1).length;
    assert.equal(frames.length, whole, `after byte ${at}`);
  }
  assert.deepEqual(frames, sent);
});

/** The bytes of frames 0 to k, encoded. */
function encodedUpTo(k: number): number {
  return sent.slice(0, k + 1).reduce((n, f) => n + encodeFrame(f.meta as never, f.body).length, 0);
}

test("several frames in one read all come out, and a body keeps every byte value", () => {
  const { reader: r, frames } = reader();
  assert.equal(r.push(wire), undefined);
  assert.deepEqual(frames, sent);
  assert.deepEqual(frames[0]!.body, everyByte);
  assert.equal(frames[1]!.body!.toString("utf8"), "héllo ☃");
  assert.deepEqual((frames[0]!.meta as typeof hit).h["x-note"], "naïve ☃");
});

test("a frame larger than the limit is refused from its header, before its bytes come", () => {
  const { reader: r, frames } = reader();
  assert.equal(r.push(encodeFrame({ i: 1, s: 200, h: {} }, "first")), undefined);
  const header = Buffer.alloc(8);
  header.writeUInt32BE(20, 0);
  header.writeUInt32BE(maxFrameBytes - 19, 4);
  assert.match(r.push(header) ?? "", new RegExp(`a frame of ${maxFrameBytes + 1} bytes, past the limit`));
  assert.equal(frames.length, 1);
  // The largest frame allowed comes through.
  const { reader: r2, frames: f2 } = reader();
  const meta = { i: 1, s: 200, h: {} };
  const big = Buffer.alloc(maxFrameBytes - JSON.stringify(meta).length, 7);
  const frame = encodeFrame(meta, big);
  for (let at = 0; at < frame.length; at += 16_384)
    assert.equal(r2.push(frame.subarray(at, at + 16_384)), undefined);
  assert.equal(f2.length, 1);
  assert.deepEqual(f2[0]!.body, big);
});

test("bytes that are not a frame end the reading: a header read from text, metadata that is not a JSON object", () => {
  // "not a frame\n", read as a header, announces more than the limit.
  assert.match(reader().reader.push(Buffer.from("not a frame\n")) ?? "", /past the limit/);
  const notJson = Buffer.concat([Buffer.from([0, 0, 0, 3, 0, 0, 0, 0]), Buffer.from("{i:")]);
  assert.equal(reader().reader.push(notJson), "a frame whose metadata is not JSON");
  const notObject = Buffer.concat([Buffer.from([0, 0, 0, 4, 0, 0, 0, 0]), Buffer.from("null")]);
  assert.equal(reader().reader.push(notObject), "a frame whose metadata is not a JSON object");
});

test("a frame cut off by the end of the connection is not delivered, and the reader says bytes were left", () => {
  const one = encodeFrame(hit, everyByte);
  for (const cut of [1, 7, 8, 20, one.length - 1]) {
    const { reader: r, frames } = reader();
    r.push(encodeFrame({ i: 9, x: true }, null));
    r.push(one.subarray(0, cut));
    assert.equal(frames.length, 1, `cut at ${cut}`);
    assert.equal(r.pending, cut);
  }
});

test("readFrames stops reading a connection once its bytes break the protocol, and says why once", async () => {
  const socket = new PassThrough();
  const frames: unknown[] = [];
  const broken: string[] = [];
  readFrames(
    socket,
    (meta) => frames.push(meta),
    (reason) => broken.push(reason),
  );
  socket.write(encodeFrame({ i: 1, x: true }, null));
  socket.write(Buffer.from([0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]));
  socket.write(encodeFrame({ i: 2, x: true }, null));
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(frames, [{ i: 1, x: true }]);
  assert.equal(broken.length, 1);
  assert.match(broken[0]!, /past the limit/);
});
