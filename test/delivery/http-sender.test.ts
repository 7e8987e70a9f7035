/**
 * HttpSender (undici's Agent and a minimal dispatch handler) against real servers on loopback: node:http receivers for the ordinary cases
 * (content-length and chunked answers, kept-alive connections, interim answers, big answers cut at
 * 64 KB), raw TCP servers that misbehave (a connection closed mid-answer, garbage instead of HTTP, an
 * idle connection closed between requests, an answer that runs to the connection's end), and TLS with a
 * certificate authority of the test's own (trusted, untrusted, wrong name). What each attempt comes to
 * is what the delivery records (docs/delivery.md, "Attempts").
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import http from "node:http";
import https from "node:https";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { AddressPolicy } from "../../src/delivery/address-guard.ts";
import { HttpSender, type OutgoingDelivery } from "../../src/delivery/http-sender.ts";
import type { AttemptOutcome } from "../../src/delivery/outcome.ts";

const clock = { now: () => Date.now() };
const open = new AddressPolicy({ allowPrivate: true, allowHosts: [] });
const closers: (() => unknown)[] = [];
after(async () => {
  for (const close of closers) await close();
});

/** A sender that allows loopback, closed after the file. */
function sender(policy = open, ca?: string): HttpSender {
  const s = new HttpSender(policy, clock as never, ca ? { ca } : undefined);
  closers.push(() => s.close());
  return s;
}

let n = 0;
function delivery(url: string, extra: Partial<OutgoingDelivery> = {}): OutgoingDelivery {
  return {
    url,
    secret: `whsec_${Buffer.from("k".repeat(24)).toString("base64")}`,
    id: `del_test${n++}`,
    emitterId: "dc_emitter",
    eventId: "1-0",
    channel: "",
    body: JSON.stringify({ text: "héllo" }),
    attempt: 1,
    ...extra,
  };
}

const never = new AbortController().signal;
const send = (s: HttpSender, d: OutgoingDelivery, timeoutMs = 10_000, stop = never) =>
  s.send(d, timeoutMs, stop);

/** Listens on loopback; closed after the file. */
async function listen<S extends net.Server>(server: S): Promise<{ server: S; url: string }> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  closers.push(() => {
    (server as unknown as http.Server).closeAllConnections?.();
    return new Promise((resolve) => server.close(resolve));
  });
  const { port } = server.address() as net.AddressInfo;
  return { server, url: `http://127.0.0.1:${port}/hook?x=1` };
}

/** A raw TCP server: `onRequest` gets each socket and each request's bytes (head and body as they came). */
async function rawServer(onRequest: (socket: net.Socket, request: string, index: number) => void) {
  let connections = 0;
  let requests = 0;
  const sockets = new Set<net.Socket>();
  const { server, url } = await listen(
    net.createServer((socket) => {
      connections++;
      sockets.add(socket);
      socket.on("close", () => sockets.delete(socket));
      let text = "";
      socket.on("data", (chunk) => {
        text += chunk.toString("latin1");
        const end = text.indexOf("\r\n\r\n");
        if (end < 0) return;
        const length = Number(/content-length: (\d+)/i.exec(text)?.[1] ?? 0);
        if (text.length < end + 4 + length) return;
        const request = text.slice(0, end + 4 + length);
        text = text.slice(end + 4 + length);
        onRequest(socket, request, requests++);
      });
      socket.on("error", () => {});
    }),
  );
  closers.push(() => {
    for (const s of sockets) s.destroy();
  });
  return { server, url, connections: () => connections, requests: () => requests };
}

/**
 * One turn of the event loop: undici's pool marks a connection free again in a microtask after the answer
 * it waited to connect for, which can run after the sender's own; the next delivery then opens a second
 * connection. Tests about reuse let that settle after a connection's first answer.
 */
const settled = () => new Promise((resolve) => setImmediate(resolve));

function assertKind(o: AttemptOutcome, kind: AttemptOutcome["kind"]) {
  assert.equal(o.kind, kind, JSON.stringify(o));
}

test("a content-length answer is read and the connection is kept for the next delivery", async () => {
  const seen: { headers: http.IncomingHttpHeaders; body: string; url: string }[] = [];
  let connections = 0;
  const { server, url } = await listen(
    http.createServer((req, res) => {
      let body = "";
      req.setEncoding("utf8");
      req.on("data", (c) => {
        body += c;
      });
      req.on("end", () => {
        seen.push({ headers: req.headers, body, url: req.url! });
        res.writeHead(201, { "x-a": "1", "set-cookie": ["a=1", "b=2"], "content-type": "text/plain" });
        res.end("créé");
      });
    }),
  );
  server.on("connection", () => connections++);
  const s = sender();
  for (let i = 0; i < 3; i++) {
    const o = await send(s, delivery(url, { channel: "orders" }));
    assertKind(o, "succeeded");
    if (o.kind !== "succeeded") return;
    assert.equal(o.statusCode, 201);
    assert.equal(o.response, "créé");
    assert.equal(o.detail!.responseHeaders!["x-a"], "1");
    assert.deepEqual(o.detail!.responseHeaders!["set-cookie"], ["a=1", "b=2"], "repeated headers as a list");
    assert.equal(o.detail!.responseTruncated, false);
    await settled();
  }
  assert.equal(connections, 1, "one kept-alive connection for the three");
  const first = seen[0]!;
  assert.equal(first.url, "/hook?x=1");
  assert.equal(first.body, JSON.stringify({ text: "héllo" }), "the body as UTF-8");
  assert.equal(first.headers["content-length"], String(Buffer.byteLength(first.body)));
  assert.equal(first.headers.host, new URL(url).host);
  assert.equal(first.headers["x-fount-event-name"], "orders");
  assert.equal(first.headers["content-type"], "application/json");
  assert.match(String(first.headers["webhook-signature"]), /^v1,/);
});

test("a chunked answer written a byte at a time, after a 103, with extensions and trailers, is read whole", async () => {
  const raw = await rawServer((socket) => {
    const wire =
      "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\nRetry-After: 7\r\n\r\n" +
      "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nx-trailer: t\r\n\r\n";
    let i = 0;
    const next = () => {
      if (i < wire.length) socket.write(wire[i++]!, "latin1", next);
    };
    next();
  });
  const s = sender();
  const o = await send(s, delivery(raw.url));
  assertKind(o, "retry");
  if (o.kind !== "retry") return;
  assert.equal(o.statusCode, 503, JSON.stringify(o));
  assert.equal(o.response, "hello world");
  assert.equal(o.retryAfterMs, 7_000);
  assert.equal(o.detail!.errorKind, "http");
  await settled();
  const again = await send(s, delivery(raw.url));
  assertKind(again, "retry");
  assert.equal(raw.connections(), 1, "a complete chunked answer leaves the connection reusable");
});

test("a failure's answer longer than 64 KB is kept to 64 KB and marked cut, chunked or not", async () => {
  const big = "a".repeat(100_000);
  const { url } = await listen(
    http.createServer((req, res) => {
      req.resume();
      const chunked = req.url!.includes("chunked");
      res.writeHead(502, chunked ? {} : { "content-length": big.length });
      if (chunked) for (let i = 0; i < 10; i++) res.write(big.slice(i * 10_000, (i + 1) * 10_000));
      res.end(chunked ? undefined : big);
    }),
  );
  const s = sender();
  for (const u of [url, `${url}&chunked`]) {
    const o = await send(s, delivery(u));
    assertKind(o, "retry");
    if (o.kind !== "retry") return;
    assert.equal(o.response!.length, 64 * 1024, u);
    assert.equal(o.detail!.responseTruncated, true, u);
  }
  const exact = await listen(
    http.createServer((req, res) => {
      req.resume();
      res.writeHead(502).end("b".repeat(64 * 1024));
    }),
  );
  const o = await send(s, delivery(exact.url));
  assert.equal(o.kind === "retry" && o.detail!.responseTruncated, false, "exactly 64 KB is not cut");
});

test("a success's answer is kept to 4 KiB and marked cut beyond", async () => {
  const { url } = await listen(
    http.createServer((req, res) => {
      req.resume();
      res.end(req.url!.includes("exact") ? "e".repeat(4096) : "a".repeat(100_000));
    }),
  );
  const s = sender();
  const o = await send(s, delivery(url));
  assertKind(o, "succeeded");
  if (o.kind !== "succeeded") return;
  assert.equal(o.response, "a".repeat(4096));
  assert.equal(o.detail!.responseTruncated, true);
  const exact = await send(s, delivery(`${url}&exact`));
  assert.equal(
    exact.kind === "succeeded" && exact.detail!.responseTruncated,
    false,
    "exactly 4 KiB is not cut",
  );
});

test("an answer without length runs to the connection's end; a 204 has no body and keeps the connection", async () => {
  const raw = await rawServer((socket, _request, i) => {
    if (i === 0) socket.write("HTTP/1.1 204 No Content\r\nx-n: 0\r\n__proto__: a\r\n__proto__: b\r\n\r\n");
    else socket.end("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nuntil the end");
  });
  const s = sender();
  const first = await send(s, delivery(raw.url));
  assert.equal(first.kind === "succeeded" && first.statusCode, 204);
  assert.equal(first.kind === "succeeded" && first.response, undefined);
  const headers = first.kind === "succeeded" ? first.detail!.responseHeaders! : {};
  assert.deepEqual(Object.entries(headers), [
    ["x-n", "0"],
    ["__proto__", ["a", "b"]],
  ]);
  await settled();
  const second = await send(s, delivery(raw.url));
  assert.equal(second.kind === "succeeded" && second.response, "until the end");
  assert.equal(raw.connections(), 1);
});

test("an idle connection the server closed between requests is replaced; one closed on a request is a retry", async () => {
  // Node's own server closes idle connections after its keep-alive timeout, as most servers do.
  let connections = 0;
  const { server, url } = await listen(
    http.createServer((req, res) => {
      req.resume();
      res.end("ok");
    }),
  );
  server.keepAliveTimeout = 50;
  server.on("connection", () => connections++);
  const s = sender();
  assertKind(await send(s, delivery(url)), "succeeded");
  await new Promise((resolve) => setTimeout(resolve, 300));
  assertKind(await send(s, delivery(url)), "succeeded");
  assert.equal(connections, 2);

  // Worse: the server reads the request on the kept connection, then closes it without a word. A POST
  // is not idempotent, so undici does not send it again: the attempt is a retry, on a new connection.
  const raw = await rawServer((socket, _request, i) => {
    if (i === 1) socket.destroy();
    else socket.write("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
  });
  assertKind(await send(s, delivery(raw.url)), "succeeded");
  const o = await send(s, delivery(raw.url));
  assertKind(o, "retry");
  assert.equal(o.kind === "retry" && o.detail!.errorKind, "reset");
  assertKind(await send(s, delivery(raw.url)), "succeeded");
  assert.equal(raw.requests(), 3, "not sent twice");
  assert.equal(raw.connections(), 2);
});

test("a connection closed mid-answer, or on a first request, is a retry that says the connection was closed", async () => {
  const raw = await rawServer((socket, _request, i) => {
    if (i === 0) socket.end("HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly this");
    else socket.destroy();
  });
  const s = sender();
  for (let i = 0; i < 2; i++) {
    const o = await send(s, delivery(raw.url));
    assertKind(o, "retry");
    if (o.kind !== "retry") return;
    assert.equal(o.detail!.errorKind, "reset");
    assert.match(o.error, /connection closed by 127\.0\.0\.1:\d+ before it answered/);
  }
  assert.equal(raw.requests(), 2, "a new connection's failure is not sent again");
});

test("garbage instead of HTTP, or a broken chunk, is a network error and the connection is dropped", async () => {
  const answers = [
    "HELLO THERE\r\n\r\n",
    "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
    "HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok",
  ];
  const raw = await rawServer((socket, _request, i) => socket.write(answers[i]!));
  const s = sender();
  for (const _ of answers) {
    const o = await send(s, delivery(raw.url));
    assertKind(o, "retry");
    if (o.kind !== "retry") return;
    assert.equal(o.detail!.errorKind, "network");
    assert.match(o.error, /network error: /);
  }
  assert.equal(raw.connections(), answers.length);
});

test("an unasked 100 Continue is a retry that says the connection was closed (undici refuses it)", async () => {
  const raw = await rawServer((socket) =>
    socket.write("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n"),
  );
  const o = await send(sender(), delivery(raw.url));
  assertKind(o, "retry");
  assert.equal(o.kind === "retry" && o.detail!.errorKind, "reset");
});

test("a URL that is not HTTP is a network error, retried, as undici's request() made it", async () => {
  const o = await send(sender(), delivery("ftp://example.com/hook"));
  assertKind(o, "retry");
  assert.equal(o.kind === "retry" && o.detail!.errorKind, "network");
  assert.match(o.kind === "retry" ? o.error : "", /UND_ERR_INVALID_ARG Invalid URL protocol/);
});

test("a header that cannot be sent fails the attempt without a connection", async () => {
  const raw = await rawServer((socket) => socket.write("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"));
  const s = sender();
  const o = await send(s, delivery(raw.url, { channel: "a\r\nx-injected: 1" }));
  assertKind(o, "retry");
  assert.match(o.kind === "retry" ? o.error : "", /invalid x-fount-event-name header/);
  assert.equal(raw.connections(), 0);
  const latin = await send(s, delivery(raw.url, { channel: "café" }));
  assertKind(latin, "succeeded");
});

test("the attempt's time limit and the dispatcher's stop end an attempt the receiver never answers", async () => {
  const raw = await rawServer(() => {});
  const s = sender();
  const o = await send(s, delivery(raw.url), 200);
  assertKind(o, "retry");
  assert.equal(o.kind === "retry" && o.detail!.errorKind, "timeout");
  const stop = new AbortController();
  const pending = send(s, delivery(raw.url), 10_000, stop.signal);
  setImmediate(() => stop.abort());
  assertKind(await pending, "release");
  assertKind(await send(s, delivery(raw.url), 10_000, stop.signal), "release");
});

test("the address policy refuses loopback by name at connect time and by literal before it", async () => {
  const raw = await rawServer((socket) => socket.write("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"));
  const port = new URL(raw.url).port;
  const s = sender(new AddressPolicy({ allowPrivate: false, allowHosts: [] }));
  for (const host of ["localhost", "127.0.0.1"]) {
    const o = await send(s, delivery(`http://${host}:${port}/`));
    assertKind(o, "failed");
    if (o.kind !== "failed") return;
    assert.equal(o.code, "destination_refused");
    assert.equal(o.detail!.errorKind, "guard");
  }
  assert.equal(raw.connections(), 0);
  assertKind(await send(s, delivery(`http://localhost:${port}/`, { allowPrivate: true })), "succeeded");
});

test("a URL is worked out once per sender: each attempt to it gets the same refusal, the allowed one goes out", async () => {
  const raw = await rawServer((socket) => socket.write("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"));
  const literal = `http://127.0.0.1:${new URL(raw.url).port}/hook?x=1`;
  const s = sender(new AddressPolicy({ allowPrivate: false, allowHosts: [] }));
  const refusedTwice = async () => {
    for (let i = 0; i < 2; i++) {
      const o = await send(s, delivery(literal));
      assertKind(o, "failed");
      assert.equal(o.kind === "failed" && o.code, "destination_refused");
      assert.deepEqual(o.kind === "failed" && o.detail, {
        url: literal,
        requestHeaders: null,
        responseHeaders: null,
        responseTruncated: false,
        errorKind: "guard",
      });
      const bad = await send(s, delivery("http://[::1/"));
      assertKind(bad, "failed");
      assert.equal(bad.kind === "failed" && bad.code, "delivery_rejected");
      assert.match(bad.kind === "failed" ? bad.error : "", /^invalid url: /);
      assert.equal(bad.kind === "failed" && bad.detail!.errorKind, "url");
    }
  };
  await refusedTwice();
  assert.equal(raw.connections(), 0);
  // A webhook an admin allowed private addresses reaches the same URL; the policed one still does not.
  assertKind(await send(s, delivery(literal, { allowPrivate: true })), "succeeded");
  assert.equal(raw.connections(), 1);
  await refusedTwice();
  assert.equal(raw.connections(), 1);
});

test("TLS: a certificate of a trusted authority is accepted; an untrusted one or another name is a TLS error", async () => {
  const dir = mkdtempSync(path.join(tmpdir(), "fount-tls-"));
  const file = (name: string) => path.join(dir, name);
  const openssl = (...args: string[]) => execFileSync("openssl", args, { stdio: "ignore" });
  openssl(
    ...["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=Test CA"],
    ...["-keyout", file("ca.key"), "-out", file("ca.pem")],
  );
  openssl(
    ...["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost"],
    ...["-keyout", file("server.key"), "-out", file("server.csr")],
  );
  const ext = file("ext.cnf");
  execFileSync("sh", ["-c", `printf 'subjectAltName=DNS:localhost\\n' > ${ext}`]);
  openssl(
    ...["x509", "-req", "-in", file("server.csr"), "-CA", file("ca.pem"), "-CAkey", file("ca.key")],
    ...["-CAcreateserial", "-days", "1", "-extfile", ext, "-out", file("server.pem")],
  );
  const { server } = await listen(
    https.createServer(
      { key: readFileSync(file("server.key")), cert: readFileSync(file("server.pem")) },
      (req, res) => {
        req.resume();
        res.end("secure");
      },
    ),
  );
  const { port } = server.address() as net.AddressInfo;
  const trusting = sender(open, readFileSync(file("ca.pem"), "utf8"));
  const o = await send(trusting, delivery(`https://localhost:${port}/`));
  assert.equal(o.kind === "succeeded" && o.response, "secure", JSON.stringify(o));
  const untrusting = await send(sender(), delivery(`https://localhost:${port}/`));
  assertKind(untrusting, "retry");
  assert.equal(untrusting.kind === "retry" && untrusting.detail!.errorKind, "tls");
  // The same server by its address, which the certificate does not name.
  const wrongName = await send(trusting, delivery(`https://127.0.0.1:${port}/`));
  assertKind(wrongName, "retry");
  assert.equal(wrongName.kind === "retry" && wrongName.detail!.errorKind, "tls", JSON.stringify(wrongName));
});
