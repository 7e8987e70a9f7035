/**
 * The listener of source endpoints: a Node HTTP server beside Fastify's, on FOUNT_ENDPOINT_PORT, that
 * answers source endpoints and nothing else, so that they never share the console's origin
 * (src/endpoint-origin.ts). Both servers are set up alike here: Fastify's timeouts, half-closed sockets
 * kept for their answer, and catalogue answers to requests Node's parser refuses.
 */
import http, { type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { clientErrorHandler } from "./plugins/errors.ts";

/** The timeouts Fastify gives a server it makes itself (it has filled in its defaults by then). */
export interface ServerTimeouts {
  keepAliveTimeout: number;
  requestTimeout: number;
  connectionTimeout: number;
}

/**
 * Bounds on the connections a listener holds (docs/operations.md, "Slow and many connections"): a client
 * that sends its headers and then drips its body held its socket for ever (no account needed), and about
 * 20,000 of them took every file descriptor of the process, after which every connection failed.
 */
export interface ConnectionLimits {
  /** Time to receive a request's headers (Node's `headersTimeout`). */
  headersTimeoutMs: number;
  /** Connections the listener holds at once (`maxConnections`); past it new ones are closed at once. */
  maxConnections: number;
  /**
   * Connections one client address may hold at once; 0: no bound. Not applied to loopback, nor when the
   * server sits behind a reverse proxy (FOUNT_TRUST_PROXY), whose own address every connection has.
   */
  maxPerAddress: number;
}

/**
 * Gives `server` Fastify's timeouts and the connection limits, and keeps a half-closed socket open
 * until its answer is sent.
 */
export function setUpServer(server: http.Server, timeouts: ServerTimeouts, limits: ConnectionLimits): void {
  server.keepAliveTimeout = timeouts.keepAliveTimeout;
  server.requestTimeout = timeouts.requestTimeout;
  // Node wants the headers' bound within the whole request's.
  server.headersTimeout = Math.min(
    limits.headersTimeoutMs,
    timeouts.requestTimeout || limits.headersTimeoutMs,
  );
  server.maxConnections = limits.maxConnections;
  if (limits.maxPerAddress > 0) boundPerAddress(server, limits.maxPerAddress);
  server.setTimeout(timeouts.connectionTimeout);
  // A client may half-close (send FIN) once its request is written and still wait for the answer.
  // By default Node ends the socket at that FIN, so a slow route's answer was never sent; with this,
  // the socket ends after the last pending response instead.
  (server as { httpAllowHalfOpen?: boolean }).httpAllowHalfOpen = true;
}

/**
 * How often Node looks for requests past their timeouts (its default, 30 s, would let a dripping client
 * hold its socket up to 30 s past them): half the headers' bound, at most 5 s.
 */
export function checkingInterval(limits: ConnectionLimits): number {
  return Math.min(5000, Math.ceil(limits.headersTimeoutMs / 2));
}

/** Closes a connection past `max` from one address (loopback excepted), counting them as they come and go. */
function boundPerAddress(server: http.Server, max: number): void {
  const open = new Map<string, number>();
  server.on("connection", (socket: Socket) => {
    const address = socket.remoteAddress;
    if (address === undefined || isLoopback(address)) return;
    const n = (open.get(address) ?? 0) + 1;
    if (n > max) {
      socket.destroy();
      return;
    }
    open.set(address, n);
    socket.once("close", () => {
      const left = (open.get(address) ?? 1) - 1;
      if (left > 0) open.set(address, left);
      else open.delete(address);
    });
  });
}

function isLoopback(address: string): boolean {
  return address === "::1" || address.startsWith("127.") || address.startsWith("::ffff:127.");
}

/** The endpoint server: listens when the app does (`BuiltApp.listen`) and closes with it. */
export class EndpointListener {
  readonly server: http.Server;
  #closed: Promise<void> | undefined;

  constructor(
    listener: (req: IncomingMessage, res: ServerResponse) => void,
    timeouts: ServerTimeouts,
    limits: ConnectionLimits,
  ) {
    this.server = http.createServer({ connectionsCheckingInterval: checkingInterval(limits) }, listener);
    setUpServer(this.server, timeouts, limits);
    this.server.on("clientError", clientErrorHandler);
  }

  /** Listens on `host:port`; answers the base URL it listens at. Node's error (EADDRINUSE with its port) on failure. */
  listen(host: string, port: number): Promise<string> {
    return new Promise((resolve, reject) => {
      this.server.once("error", reject);
      this.server.listen({ host, port }, () => {
        this.server.off("error", reject);
        const address = this.server.address() as AddressInfo;
        const name = address.family === "IPv6" ? `[${address.address}]` : address.address;
        resolve(`http://${name}:${address.port}`);
      });
    });
  }

  /**
   * Takes no new connection, closes the idle ones, and resolves once the requests in flight are
   * answered (their answers ask to close the connection: see `closing` in routes/endpoints.ts).
   */
  close(): Promise<void> {
    if (this.#closed) return this.#closed;
    if (!this.server.listening) return Promise.resolve();
    this.#closed = new Promise((resolve) => {
      this.server.close(() => resolve());
      this.server.closeIdleConnections();
    });
    return this.#closed;
  }
}
