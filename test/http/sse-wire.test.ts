/**
 * The bytes of an SSE response, read off raw sockets: the stream hub writes chunks to the socket itself
 * (http/sse-sink.ts), so the chunked framing, an HTTP/1.0 client's unframed body, a stream pipelined
 * behind another request, and the body's end when the source is deleted are checked on the wire.
 */
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, test } from "node:test";
import { adminKey, startServer, type TestServer } from "../helpers.ts";

const emitterCode = `export default {
  name: "sse-wire",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  run(e) { for (const n of e.body.ns) this.$emit({ n }); },
};
`;

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(async () => {
  await server.close();
});

/** A raw connection that sends `request` and keeps everything it reads, as latin1 text. */
function connect(request: string): { text: () => string; closed: Promise<void>; socket: net.Socket } {
  const url = new URL(server.url);
  const socket = net.connect({ host: url.hostname, port: Number(url.port) });
  let text = "";
  socket.setEncoding("latin1").on("data", (d: string) => {
    text += d;
  });
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  socket.write(request);
  return { text: () => text, closed, socket };
}

async function until(check: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!check()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** The body of a chunked response, its chunks joined; throws on a malformed chunk. */
function dechunk(body: string): { data: string; ended: boolean } {
  let data = "";
  let at = 0;
  for (;;) {
    const line = body.indexOf("\r\n", at);
    if (line < 0) return { data, ended: false };
    const size = Number.parseInt(body.slice(at, line), 16);
    assert.ok(Number.isInteger(size), `a chunk size at ${at}: ${JSON.stringify(body.slice(at, line))}`);
    if (size === 0) return { data, ended: true };
    if (body.length < line + 2 + size + 2) return { data, ended: false };
    data += body.slice(line + 2, line + 2 + size);
    assert.equal(body.slice(line + 2 + size, line + 4 + size), "\r\n");
    at = line + 4 + size;
  }
}

test("HTTP/1.1 streams are chunked, HTTP/1.0 ones are not, a pipelined one follows the answer before it, and all end with the source", async () => {
  const res = await server.api("POST", "/v1/sources", { body: { component_code: emitterCode } });
  assert.equal(res.status, 200, res.text);
  const { id, endpoint_url: endpoint } = res.body.data as { id: string; endpoint_url: string };
  const path = `/sources/${id}/sse`;
  const auth = `Authorization: Bearer ${adminKey}\r\n`;
  const http11 = connect(`GET ${path} HTTP/1.1\r\nHost: x\r\n${auth}\r\n`);
  const http10 = connect(`GET ${path} HTTP/1.0\r\n${auth}\r\n`);
  const piped = connect(
    `GET /readyz HTTP/1.1\r\nHost: x\r\n\r\nGET ${path} HTTP/1.1\r\nHost: x\r\n${auth}\r\n`,
  );
  const streams = [http11, http10, piped];
  await until(() => streams.every((s) => s.text().includes(":ok\nretry:")), "every stream to open");

  // Three events of one run, then one more.
  for (const ns of [[1, 2, 3], [4]]) {
    const hit = await fetch(endpoint, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ ns }),
    });
    assert.equal(hit.status, 200);
  }
  const bodyOf = (s: { text: () => string }, n: number) =>
    s.text().split("\r\n\r\n").slice(n).join("\r\n\r\n");
  const events = (data: string) => [...data.matchAll(/^data: (.*)$/gm)].map((m) => JSON.parse(m[1]!).event.n);
  await until(() => events(dechunk(bodyOf(http11, 1)).data).length === 4, "the HTTP/1.1 stream's events");
  await until(() => events(bodyOf(http10, 1)).length === 4, "the HTTP/1.0 stream's events");
  await until(() => events(dechunk(bodyOf(piped, 2)).data).length === 4, "the pipelined stream's events");

  assert.match(http11.text(), /\r\ntransfer-encoding: chunked\r\n/i);
  assert.doesNotMatch(http10.text(), /transfer-encoding/i);
  assert.match(piped.text(), /^HTTP\/1\.1 200 OK[\s\S]*"status":"ready"[\s\S]*HTTP\/1\.1 200 OK/);
  for (const data of [dechunk(bodyOf(http11, 1)).data, bodyOf(http10, 1), dechunk(bodyOf(piped, 2)).data]) {
    assert.deepEqual(events(data), [1, 2, 3, 4]);
    assert.match(data, /^:ok\nretry: \d+\n\n(id: \d+-\d+\ndata: [^\n]+\n\n){4}$/);
  }

  const deleted = await server.api("DELETE", `/v1/sources/${id}`);
  assert.equal(deleted.status, 200, deleted.text);
  // The chunked bodies end with their last chunk; the HTTP/1.0 one with its connection.
  await until(
    () => dechunk(bodyOf(http11, 1)).ended && dechunk(bodyOf(piped, 2)).ended,
    "the chunked bodies to end",
  );
  await http10.closed;
  for (const s of streams) s.socket.destroy();
});
