/**
 * Requests component code makes to `https://api.pipedream.com` (Pipedream's app files hard-code it)
 * are answered by this Fount's own API, carried over the realm's channel rather than the network:
 * executors may not reach the server's loopback address, and no hole is opened for this.
 *
 * The hook sits at `tls.connect`, which every HTTPS client in Node reaches when it opens a connection
 * (https.request, and so axios, got and node-fetch; fetch and undici, Node's own and the npm package).
 * A connection to api.pipedream.com:443 gets an in-memory socket instead of TLS. Its far end is an HTTP
 * server of the realm's own that never listens: the component's client speaks plain HTTP/1.1 to it
 * exactly as it would to Pipedream, and each request the server parses is handed to the runner, which
 * the pool answers through the API. It is routing, not a boundary: the request carries only the
 * credentials the component sent, and the server checks them like any client's (docs/isolation.md).
 * Not covered: HTTP/2 (`http2.connect`) and TLS over a socket the component opened itself.
 */
import type http from "node:http";
import { syncBuiltinESMExports } from "node:module";
import { type Duplex, duplexPair } from "node:stream";
import type tls from "node:tls";
import type { ComponentApiRequest } from "../../types.ts";

export const pipedreamApiHost = "api.pipedream.com";

/** Headers that describe one connection, not the request or answer: never carried across. */
const hopByHop = new Set([
  "connection",
  "keep-alive",
  "transfer-encoding",
  "upgrade",
  "proxy-connection",
  "te",
  "trailer",
]);
/** Idle keep-alive connections are closed after this long, as Fount's own server closes them. */
const KEEP_ALIVE_MS = 5000;

/**
 * Routes connections to api.pipedream.com:443 to `send`; returns the function that hands the API's
 * answer (`response`, untrusted shape) to the request `id`.
 */
export function installPipedreamApi(
  bodyLimit: number,
  send: (id: number, request: ComponentApiRequest) => void,
): (id: number, response: unknown) => void {
  const waiting = new Map<number, http.ServerResponse>();
  let seq = 0;
  const onRequest = (req: http.IncomingMessage, res: http.ServerResponse) => {
    const id = ++seq;
    const chunks: Buffer[] = [];
    let size = 0;
    let sent = false;
    const forward = () => {
      if (sent) return;
      sent = true;
      waiting.set(id, res);
      res.once("close", () => waiting.delete(id));
      send(id, {
        method: req.method ?? "GET",
        url: req.url ?? "/",
        headers: requestHeaders(req.headers),
        body: Buffer.concat(chunks).toString("base64"),
      });
    };
    req.on("data", (chunk: Buffer) => {
      if (sent) return;
      chunks.push(chunk);
      size += chunk.length;
      if (size > bodyLimit) {
        // One byte past the limit is enough for the API to refuse it as too large; the rest is dropped
        // and the connection closed after the answer.
        chunks.splice(0, chunks.length, Buffer.concat(chunks).subarray(0, bodyLimit + 1));
        res.shouldKeepAlive = false;
        forward();
      }
    });
    req.on("end", forward);
    req.on("error", () => res.destroy());
  };
  // Made on the first connection: node:http costs a realm several ms to load, and most never call the API.
  let server: http.Server | undefined;
  const serverOf = (): http.Server =>
    (server ??= (process.getBuiltinModule("node:http") as typeof http).createServer(
      { keepAliveTimeout: KEEP_ALIVE_MS },
      onRequest,
    ));

  // Fetched here rather than imported, so that a realm with the routing off does not load node:tls.
  const tlsModule = process.getBuiltinModule("node:tls") as typeof tls;
  const original = tlsModule.connect;
  const routed = function (this: unknown, ...args: unknown[]) {
    if (!isPipedreamApi(args)) return Reflect.apply(original, this, args);
    const [client, far] = duplexPair();
    socketLike(client, far);
    serverOf().emit("connection", far);
    const onSecure = args.find((a) => typeof a === "function");
    if (onSecure) client.once("secureConnect", onSecure as () => void);
    // A TLS socket announces itself asynchronously; undici waits for `secureConnect`, http for `connect`.
    process.nextTick(() => {
      if (client.destroyed) return;
      client.emit("connect");
      client.emit("secureConnect");
    });
    return client;
  } as typeof tls.connect;
  tlsModule.connect = routed;
  syncBuiltinESMExports();

  return (id, response) => {
    const res = waiting.get(id);
    waiting.delete(id);
    if (!res || res.destroyed) return;
    const answer =
      typeof response === "object" && response !== null ? (response as Record<string, unknown>) : {};
    const status = Number.isInteger(answer.status) ? (answer.status as number) : 502;
    const headers: Record<string, string | string[]> = {};
    if (typeof answer.headers === "object" && answer.headers !== null) {
      for (const [name, value] of Object.entries(answer.headers)) {
        if (hopByHop.has(name.toLowerCase())) continue;
        if (typeof value === "string") headers[name] = value;
        else if (Array.isArray(value)) headers[name] = value.map(String);
      }
    }
    const body = typeof answer.body === "string" ? Buffer.from(answer.body, "base64") : Buffer.alloc(0);
    try {
      res.writeHead(status, headers);
      res.end(body);
    } catch {
      res.destroy();
    }
  };
}

/** Whether `tls.connect(...args)` is for https://api.pipedream.com (port 443, no socket of its own). */
function isPipedreamApi(args: unknown[]): boolean {
  let options: Record<string, unknown> = {};
  let port: unknown;
  let host: unknown;
  if (typeof args[0] === "object" && args[0] !== null) options = args[0] as Record<string, unknown>;
  else if (typeof args[0] === "number" || (typeof args[0] === "string" && /^\d+$/.test(args[0]))) {
    port = args[0];
    if (typeof args[1] === "string") host = args[1];
    const rest = args.find((a, i) => i > 0 && typeof a === "object" && a !== null);
    if (rest) options = rest as Record<string, unknown>;
  } else return false;
  // `path` is no sign of a Unix socket here: Node's HTTP agents pass the request's path along.
  if (options.socket !== undefined) return false;
  host ??= options.host ?? options.servername;
  port ??= options.port ?? 443;
  return (
    typeof host === "string" &&
    host.toLowerCase().replace(/\.$/, "") === pipedreamApiHost &&
    Number(port) === 443
  );
}

function requestHeaders(raw: http.IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(raw)) {
    if (value === undefined || hopByHop.has(name) || name === "content-length") continue;
    out[name] = Array.isArray(value) ? value.join(", ") : value;
  }
  return out;
}

/**
 * Gives both ends of an in-memory pair what HTTP clients and servers call on a TCP/TLS socket:
 * idle timeouts (keep-alive agents and request timeouts rely on them), no-op socket options, and
 * the TLS facts a client may read (undici reads `alpnProtocol` to choose HTTP/1.1).
 */
function socketLike(client: Duplex, far: Duplex): void {
  const timers: Array<{ side: Duplex; timer: NodeJS.Timeout | undefined }> = [];
  const touch = () => {
    for (const t of timers) t.timer?.refresh();
  };
  for (const side of [client, far]) {
    const entry: { side: Duplex; timer: NodeJS.Timeout | undefined } = { side, timer: undefined };
    timers.push(entry);
    const push = side.push.bind(side);
    // Data arriving on either end is activity on both: one's writes are the other's pushes.
    side.push = (chunk: unknown, encoding?: BufferEncoding) => {
      touch();
      return push(chunk, encoding);
    };
    Object.assign(side, {
      connecting: false,
      encrypted: true,
      authorized: true,
      authorizationError: null,
      alpnProtocol: false,
      servername: pipedreamApiHost,
      remoteAddress: "127.0.0.1",
      remotePort: 443,
      remoteFamily: "IPv4",
      localAddress: "127.0.0.1",
      localPort: 0,
      setTimeout(ms: number, callback?: () => void) {
        clearTimeout(entry.timer);
        entry.timer = undefined;
        if (callback) side.once("timeout", callback);
        if (ms > 0) entry.timer = setTimeout(() => side.emit("timeout"), ms).unref();
        return side;
      },
      setNoDelay: () => side,
      setKeepAlive: () => side,
      ref: () => side,
      unref: () => side,
      address: () => ({ address: "127.0.0.1", family: "IPv4", port: 0 }),
      getPeerCertificate: () => ({}),
      getCertificate: () => null,
      getSession: () => undefined,
      getProtocol: () => "TLSv1.3",
      getCipher: () => ({
        name: "TLS_AES_128_GCM_SHA256",
        standardName: "TLS_AES_128_GCM_SHA256",
        version: "TLSv1.3",
      }),
      isSessionReused: () => false,
    });
    // One end gone ends the other, as a closed TCP connection would.
    side.once("close", () => {
      clearTimeout(entry.timer);
      const other = side === client ? far : client;
      if (!other.destroyed) other.destroy();
    });
  }
}
