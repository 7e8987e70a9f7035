/**
 * Slow and many connections (docs/operations.md): a request must arrive whole within
 * FOUNT_REQUEST_TIMEOUT_MS and its headers within FOUNT_HEADERS_TIMEOUT_MS, on the API's listener and the
 * endpoints' alike (a client dripping its body held its socket for ever, and 20,000 of them took every
 * file descriptor); each listener holds at most FOUNT_MAX_CONNECTIONS, and one client address at most
 * FOUNT_MAX_CONNECTIONS_PER_ADDRESS.
 */
import assert from "node:assert/strict";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import { after, before, test } from "node:test";
import { setUpServer } from "../../src/http/endpoint-listener.ts";
import { deploySource, hookSourceCode } from "../delivery/receiver.ts";
import { startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
before(async () => {
  server = await startServer(
    { requestTimeoutMs: 1500, headersTimeoutMs: 1000 },
    { FOUNT_MAX_CONNECTIONS: "40" },
  );
});
after(() => server.close());

/** Sends `text` and then a byte now and then (`dripMs`); resolves with what came back once the server closed. */
function held(url: URL, text: string, dripMs = 0): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(url.port), url.hostname, () => socket.write(text));
    let answer = "";
    const drip = dripMs > 0 ? setInterval(() => socket.write("x"), dripMs) : undefined;
    socket.setEncoding("utf8");
    socket.on("data", (chunk) => {
      answer += chunk;
    });
    socket.on("error", () => undefined);
    socket.on("close", () => {
      clearInterval(drip);
      clearTimeout(limit);
      resolve(answer);
    });
    // Far past the bounds under test: the test fails rather than hangs.
    const limit = setTimeout(() => {
      socket.destroy();
      reject(new Error(`the server kept the connection for 60 s (${answer})`));
    }, 60_000);
  });
}

test("a request whose body drips is answered 408 and closed, on the API's listener and the endpoints'", async () => {
  const source = await deploySource(server, hookSourceCode);
  for (const target of [new URL("/v1/users/me", server.url), new URL(source.endpoint)]) {
    const head =
      `POST ${target.pathname} HTTP/1.1\r\nHost: ${target.host}\r\nContent-Type: application/json\r\n` +
      "Content-Length: 100000\r\n\r\n{";
    const answer = await held(target, head, 200);
    assert.match(answer, /^HTTP\/1\.1 408 /, `${target}: ${answer}`);
    assert.match(answer, /"code":"request_timeout"/);
  }
});

test("a request whose headers never end is closed", async () => {
  for (const base of [server.url, server.endpoints]) {
    const answer = await held(new URL(base), "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ");
    assert.match(answer, /^$|^HTTP\/1\.1 408 /, `${base}: ${answer}`);
  }
});

/**
 * Connects and asks for `/healthz` on a kept-alive connection: "answered", or "refused" when the server
 * closes it without an answer (a connection past a limit). No timer decides, so a slow machine cannot
 * take one for the other.
 */
function attempt(port: number, host: string, open: net.Socket[]): Promise<"answered" | "refused"> {
  return new Promise((resolve) => {
    const socket = net.connect(port, host, () =>
      socket.write(`GET /healthz HTTP/1.1\r\nHost: ${host}:${port}\r\n\r\n`),
    );
    open.push(socket);
    socket.on("error", () => undefined);
    socket.once("data", () => resolve("answered"));
    socket.once("close", () => resolve("refused"));
  });
}

test("past FOUNT_MAX_CONNECTIONS a listener closes new connections at once, and takes them again once some close", async () => {
  const { hostname, port } = new URL(server.url);
  const open: net.Socket[] = [];
  try {
    // The harness's own kept-alive connections count too: connect until one is refused.
    const outcomes: string[] = [];
    while (outcomes.length < 60 && !outcomes.includes("refused"))
      outcomes.push(await attempt(Number(port), hostname, open));
    assert.equal(outcomes.at(-1), "refused", outcomes.join(" "));
    assert.ok(outcomes.length <= 41, `${outcomes.length - 1} connections held`);
  } finally {
    for (const socket of open) socket.destroy();
  }
  // Room again once they closed.
  await new Promise((r) => setTimeout(r, 200));
  const res = await server.api("GET", "/v1/users/me");
  assert.equal(res.status, 200, res.text);
});

/** A non-loopback IPv4 address of this machine (loopback is exempt from the per-address bound). */
const external = Object.values(os.networkInterfaces())
  .flat()
  .find((i) => i && i.family === "IPv4" && !i.internal)?.address;

test("one client address may hold FOUNT_MAX_CONNECTIONS_PER_ADDRESS connections at once", {
  skip: external ? false : "no non-loopback address to listen on",
}, async () => {
  const host = external!;
  const plain = http.createServer((_req, res) => res.end("ok"));
  setUpServer(
    plain,
    { keepAliveTimeout: 5000, requestTimeout: 30_000, connectionTimeout: 0 },
    { headersTimeoutMs: 15_000, maxConnections: 1000, maxPerAddress: 3 },
  );
  await new Promise<void>((resolve) => plain.listen(0, host, resolve));
  const port = (plain.address() as net.AddressInfo).port;
  const open: net.Socket[] = [];
  try {
    const outcomes: string[] = [];
    for (let i = 0; i < 4; i++) outcomes.push(await attempt(port, host, open));
    assert.deepEqual(outcomes, ["answered", "answered", "answered", "refused"]);
    // Once one closes, the address may connect again.
    await new Promise<void>((resolve) => {
      open[0]!.once("close", () => resolve());
      open[0]!.destroy();
    });
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(await attempt(port, host, open), "answered");
  } finally {
    for (const socket of open) socket.destroy();
    plain.closeAllConnections();
    await new Promise((r) => plain.close(r));
  }
});
