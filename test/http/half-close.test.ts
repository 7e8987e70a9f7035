/**
 * A client that sends a whole request and then half-closes its side of the connection (`shutdown(SHUT_WR)`,
 * what `curl` does after an upload and what some proxies do) still gets its answer, also on slow routes.
 */
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, test } from "node:test";
import { deploy, events, fixture } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";
import { unique } from "./openapi-walk.ts";

let server: TestServer;
let owner: { id: string; key: string };
before(async () => {
  server = await startServer();
  owner = await server.createUser(unique("halfclose"));
});
after(() => server.close());

/** Writes one request (to `base`, default the API's), ends the writing side at once, and reads until the server closes. */
function halfClosed(
  method: string,
  path: string,
  body: string,
  key?: string,
  base = server.url,
): Promise<string> {
  return new Promise((resolve, reject) => {
    const url = new URL(base);
    const socket = net.connect(Number(url.port), url.hostname);
    let answer = "";
    socket.setEncoding("utf8");
    socket.on("data", (d: string) => {
      answer += d;
    });
    socket.on("end", () => resolve(answer));
    socket.on("error", reject);
    socket.write(
      `${method} ${path} HTTP/1.1\r\nHost: ${url.host}\r\ncontent-type: application/json\r\n` +
        `content-length: ${Buffer.byteLength(body)}\r\n${key ? `authorization: Bearer ${key}\r\n` : ""}\r\n${body}`,
    );
    socket.end();
  });
}

test("a half-closed client gets the answer of a slow source endpoint", async () => {
  const source = await deploy(server, { component_code: fixture("slow-run.mjs") }, owner.key);
  const endpoint = new URL(source.configured_props.http.endpoint_url as string);
  const answer = await halfClosed(
    "POST",
    `${endpoint.pathname}?ms=300`,
    '{"a":1}',
    undefined,
    endpoint.origin,
  );
  assert.match(answer, /^HTTP\/1\.1 200 /, answer);
  assert.match(answer, /\{"success":true\}$/);
  assert.deepEqual(
    (await events(server, source.id, undefined, owner.key)).map((e) => e.event),
    [{ waited: 300 }],
  );
});

test("a half-closed client gets the answer of a manual run and of a quick API read", async () => {
  const source = await deploy(server, { component_code: fixture("slow-run.mjs") }, owner.key);
  const run = await halfClosed(
    "POST",
    `/v1/sources/${source.id}/run`,
    JSON.stringify({ event: { query: { ms: "300" } } }),
    owner.key,
  );
  assert.match(run, /^HTTP\/1\.1 200 /, run);
  assert.match(run, /"waited":300/);
  const me = await halfClosed("GET", "/v1/users/me", "", owner.key);
  assert.match(me, /^HTTP\/1\.1 200 /, me);
});
