/**
 * The listener of source endpoints: a Node HTTP server beside Fastify's, on FOUNT_ENDPOINT_PORT, that
 * answers source endpoints and nothing else, so that they never share the console's origin
 * (src/endpoint-origin.ts). Both servers are set up alike here: Fastify's timeouts, half-closed sockets
 * kept for their answer, and catalogue answers to requests Node's parser refuses.
 */
import http, { type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { clientErrorHandler } from "./plugins/errors.ts";

/** The timeouts Fastify gives a server it makes itself (it has filled in its defaults by then). */
export interface ServerTimeouts {
  keepAliveTimeout: number;
  requestTimeout: number;
  connectionTimeout: number;
}

/** Gives `server` Fastify's timeouts and keeps a half-closed socket open until its answer is sent. */
export function setUpServer(server: http.Server, timeouts: ServerTimeouts): void {
  server.keepAliveTimeout = timeouts.keepAliveTimeout;
  server.requestTimeout = timeouts.requestTimeout;
  server.setTimeout(timeouts.connectionTimeout);
  // A client may half-close (send FIN) once its request is written and still wait for the answer.
  // By default Node ends the socket at that FIN, so a slow route's answer was never sent; with this,
  // the socket ends after the last pending response instead.
  (server as { httpAllowHalfOpen?: boolean }).httpAllowHalfOpen = true;
}

/** The endpoint server: listens when the app does (`BuiltApp.listen`) and closes with it. */
export class EndpointListener {
  readonly server: http.Server;
  #closed: Promise<void> | undefined;

  constructor(listener: (req: IncomingMessage, res: ServerResponse) => void, timeouts: ServerTimeouts) {
    this.server = http.createServer(listener);
    setUpServer(this.server, timeouts);
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
