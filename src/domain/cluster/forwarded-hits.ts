/**
 * The receiving end of hit forwarding: the forwarding connections other nodes open to this one (taken
 * as an upgrade of the API server's requests, then TLS with the cluster's pre-shared key), and the hits
 * on them, run here and answered in any order. Shutting down, it turns new hits down and says `bye`
 * once the hits it took are answered.
 */
import type { IncomingMessage } from "node:http";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import tls from "node:tls";
import type { FastifyBaseLogger } from "fastify";
import { AppError } from "../../errors.ts";
import {
  type AnswerMeta,
  connectTimeoutMs,
  type Elsewhere,
  encodeFrame,
  type ForwardedHit,
  forwardPath,
  type HitAnswer,
  type HitMeta,
  hitOf,
  maxFrameBytes,
  nodeHeader,
  Outbox,
  pskIdentity,
  readFrames,
  tlsOptions,
  upgradeProtocol,
} from "./forwarding-protocol.ts";

export interface ForwardedHitsDeps {
  /** The cluster's pre-shared key (the same on every node). */
  psk: Buffer;
  /** Runs a forwarded hit here, answering as to a client; `Elsewhere`: this node does not run its source. */
  serve: (hit: ForwardedHit) => Promise<HitAnswer | Elsewhere>;
  logger: FastifyBaseLogger;
}

interface Incoming {
  socket: Duplex;
  /** Hits taken and not yet answered. */
  running: number;
  outbox: Outbox;
  flushing: boolean;
  /** `bye` was sent: nothing more is written. */
  ended: boolean;
  /** The other node ended its side (its link closed): no more hits come, and this side ends once they are answered. */
  peerEnded: boolean;
  /** The node at the other end, as its upgrade request named it. */
  from: string | undefined;
}

/** At most one line per this long about refused handshakes. */
const refusedLogMs = 60_000;

/** The receiving side: forwarding connections from the other nodes, and the hits on them. */
export class ForwardedHits {
  readonly #d: ForwardedHitsDeps;
  readonly #connections = new Set<Incoming>();
  #closing = false;
  #drained: (() => void) | undefined;

  /** Handshakes refused since the last one logged, and when that was (epoch ms). */
  #refused = 0;
  #refusedLoggedAt = 0;

  constructor(deps: ForwardedHitsDeps) {
    this.#d = deps;
  }

  /**
   * An upgrade request to the server: a forwarding connection is taken; false for any other. It is a
   * node's only once the TLS handshake proved that the other end has the cluster's key.
   */
  accept(req: IncomingMessage, raw: Duplex, head: Buffer): boolean {
    if (req.url !== forwardPath) return false;
    const refuse = (status: string) => {
      raw.end(`HTTP/1.1 ${status}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`);
      return true;
    };
    if (req.headers.upgrade !== upgradeProtocol) return refuse("400 Bad Request");
    if (this.#closing) return refuse("503 Service Unavailable");
    raw.write(
      `HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: ${upgradeProtocol}\r\n\r\n`,
    );
    (raw as Socket).setNoDelay(true);
    // Bytes that came with the request are the start of the TLS handshake.
    if (head.length > 0) raw.unshift(head);
    // Node's TLSSocket takes a server's `pskCallback` as tls.createServer does; its type leaves it out.
    const serverOptions: tls.TLSSocketOptions & Pick<tls.TlsOptions, "pskCallback"> = {
      ...tlsOptions,
      isServer: true,
      pskCallback: (_socket, identity) => (identity === pskIdentity ? this.#d.psk : null),
    };
    const socket = new tls.TLSSocket(raw as Socket, serverOptions);
    const named = req.headers[nodeHeader];
    const from = typeof named === "string" && /^[\w.:/-]{1,200}$/.test(named) ? named : undefined;
    const remote = req.socket.remoteAddress;
    const timer = setTimeout(() => socket.destroy(), connectTimeoutMs);
    socket.once("close", () => clearTimeout(timer));
    socket.once("error", (err) => {
      clearTimeout(timer);
      // Anyone who reaches the port can fail a handshake: one line a minute, with how many it stands for.
      this.#refused++;
      const now = Date.now();
      if (now - this.#refusedLoggedAt >= refusedLogMs) {
        this.#d.logger.warn(
          { remote, err, refused: this.#refused },
          "refused a forwarding connection: its TLS handshake failed (a node with another FOUNT_ENCRYPTION_KEY?)",
        );
        this.#refused = 0;
        this.#refusedLoggedAt = now;
      }
      socket.destroy();
    });
    socket.once("secure", () => {
      clearTimeout(timer);
      socket.removeAllListeners("error");
      socket.on("error", () => undefined);
      const conn: Incoming = {
        socket,
        running: 0,
        outbox: new Outbox(),
        flushing: false,
        ended: false,
        peerEnded: false,
        from,
      };
      this.#connections.add(conn);
      // The upgraded socket keeps the HTTP server's half-open setting, so the other node's end of the
      // connection would leave this side open for as long as this process runs.
      socket.once("end", () => {
        conn.peerEnded = true;
        this.#endIfIdle(conn);
      });
      socket.once("close", () => {
        this.#connections.delete(conn);
        this.#checkDrained();
      });
      const broken = (reason: string) => {
        this.#d.logger.warn({ remote, node: from }, `closed a forwarding connection: it sent ${reason}`);
        socket.destroy();
      };
      readFrames(
        socket,
        (meta, body) => {
          // Frames read in the same chunk as a bad one are not run: the connection is given up.
          if (socket.destroyed) return;
          const hit = hitOf(meta as Record<string, unknown>, body);
          if (typeof hit === "string") broken(hit);
          else this.#hit(conn, hit, body ?? Buffer.alloc(0));
        },
        broken,
      );
      // Closing began during the handshake: nothing is taken.
      if (this.#closing) this.#end(conn);
    });
    return true;
  }

  /**
   * Turns down new hits, and resolves once the hits taken are answered and the connections ended (or
   * after `waitMs`, when the rest are cut off: the process is about to end).
   */
  close(waitMs = 25_000): Promise<void> {
    this.#closing = true;
    for (const conn of this.#connections) this.#endIfIdle(conn);
    if (this.#connections.size === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        for (const conn of this.#connections) conn.socket.destroy();
        resolve();
      }, waitMs);
      this.#drained = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  /** Ends the connection now when no hit it took is running or waiting to be written (else `#send` will). */
  #endIfIdle(conn: Incoming): void {
    if (conn.running === 0 && !conn.flushing) this.#end(conn);
  }

  /** Says `bye` and ends the connection: the hits it took are answered. */
  #end(conn: Incoming): void {
    if (conn.ended) return;
    conn.ended = true;
    conn.socket.end(encodeFrame({ bye: true }, null));
  }

  #hit(conn: Incoming, frame: HitMeta, body: Buffer): void {
    if (this.#closing) {
      this.#send(conn, { i: frame.i, x: true }, null);
      return;
    }
    conn.running++;
    const hit: ForwardedHit = {
      method: frame.m,
      url: frame.u,
      headers: frame.h,
      body,
      trace: frame.t,
      from: conn.from,
    };
    this.#serve(hit).then(
      (answer) => this.#answer(conn, frame, answer),
      (err: unknown) => {
        // Endpoints answer their own failures: one thrown here is a fault of Fount's, which must not
        // take the process down with it (an unhandled rejection), nor leave the hit unanswered.
        this.#d.logger.error({ err, node: conn.from, url: hit.url }, "a forwarded hit failed here");
        this.#answer(
          conn,
          frame,
          errorAnswer(new AppError("internal"), requestIdOf(frame.h["x-request-id"])),
        );
      },
    );
  }

  /** Runs the hit; what `serve` throws, before its promise, is a rejection too. */
  async #serve(hit: ForwardedHit): Promise<HitAnswer | Elsewhere> {
    return this.#d.serve(hit);
  }

  #answer(conn: Incoming, frame: HitMeta, answer: HitAnswer | Elsewhere): void {
    conn.running--;
    // An unknown node (`to` undefined) is left out of the frame.
    if ("elsewhere" in answer) {
      this.#send(conn, { i: frame.i, r: true, to: answer.elsewhere }, null);
      return;
    }
    if (this.#send(conn, { i: frame.i, s: answer.status, h: answer.headers }, answer.body)) return;
    // Written, the frame would make the forwarding node give up the connection, failing every hit on it
    // (of any source) as cut off. The hit ran: its caller is told why its answer did not come.
    const requestId = requestIdOf(answer.headers["x-request-id"]);
    this.#d.logger.warn(
      { node: conn.from, url: frame.u, reqId: requestId, status: answer.status },
      `a forwarded hit's answer is too large to relay (its frame past ${maxFrameBytes} bytes): answered component_error instead`,
    );
    const err = errorAnswer(tooLarge(requestId), requestId);
    this.#send(conn, { i: frame.i, s: err.status, h: err.headers }, err.body);
  }

  /** Queues an answer frame; false when it is past the frame limit (nothing queued). */
  #send(conn: Incoming, meta: AnswerMeta, body: string | Buffer | null): boolean {
    if (conn.ended) return true;
    if (!conn.outbox.add(meta, body)) return false;
    if (conn.flushing) return true;
    conn.flushing = true;
    setImmediate(() => {
      conn.flushing = false;
      if (conn.outbox.size > 0) conn.socket.write(conn.outbox.take());
      if ((this.#closing || conn.peerEnded) && conn.running === 0) this.#end(conn);
    });
    return true;
  }

  #checkDrained(): void {
    if (this.#closing && this.#connections.size === 0) this.#drained?.();
  }
}

/** The error in place of an answer too large to relay: the source ran, so a retry runs it again. */
function tooLarge(requestId: string | undefined): AppError {
  return new AppError(
    "component_error",
    `The source ran, but its answer is too large to relay from the node that ran it (at most ${maxFrameBytes} bytes with its headers)`,
    { details: { request_id: requestId, reason: "answer_too_large" } },
  );
}

/**
 * An error answer made here, not by the endpoint: JSON, with the headers every endpoint answer has
 * (http/routes/endpoints.ts), the request's ID among them when it is one.
 */
function errorAnswer(err: AppError, requestId: string | undefined): HitAnswer {
  const headers: Record<string, string> = {
    "access-control-allow-origin": "*",
    "content-security-policy": "sandbox",
    "x-content-type-options": "nosniff",
    "content-type": "application/json; charset=utf-8",
  };
  if (requestId !== undefined) headers["x-request-id"] = requestId;
  return { status: err.status, headers, body: JSON.stringify(err.toJSON()) };
}

/** The request ID the endpoint gave a hit (the forwarding node sends it as a header), when it is one. */
function requestIdOf(value: unknown): string | undefined {
  return typeof value === "string" && /^[\w.-]{1,128}$/.test(value) ? value : undefined;
}
