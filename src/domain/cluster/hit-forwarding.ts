/**
 * Hits go to the node that runs their source. With several nodes behind a load balancer that spreads
 * requests, a source's endpoint hits arrive at every node, but its invocations run on one node at a time
 * (source-leases.ts). Taking the lease over for each hit would move it back and forth, each move costing
 * round trips, a fresh read of the source's state and a wait for the holder's runs. Instead a node that
 * gets a hit of a source another live node holds sends the request on to that node, as it came, and
 * relays the answer: the source keeps running where it runs, with its batches and caches.
 *
 * Transport: one connection from each node to each other node it forwards to, opened as an HTTP upgrade
 * of `GET /_fount/forward` and then carried in TLS 1.3 with a pre-shared key derived from
 * FOUNT_ENCRYPTION_KEY (every node of the cluster has the key; a caller does not): the key authenticates
 * both ends, and hits, with their headers and bodies, never cross the network in clear, whatever the
 * network between the nodes. The handshake is once per connection; ECDHE in it gives each connection
 * keys of its own (a key leaked later does not open recorded traffic). Inside, each side writes lines
 * of JSON: hits one way, answers the other, matched by a number, answered in any order. The lines queued
 * in one turn of the event loop go out in one write (encrypted together), so that under load many hits share
 * a system call and a wake-up of the other node (on loopback a write costs the sender the receiver's TCP
 * work too). A node forwards only to a node that gave its URL (`nodes.url`: FOUNT_NODE_URL, or the
 * address it listens on).
 *
 * Failures: a node that cannot be connected to (refused, no answer, another key, a version without
 * forwarding or with another version of it) was sent nothing; it is skipped for a while and the hit
 * runs here, taking the lease as before (after the holder's heartbeat stops, if it died). A node
 * shutting down turns down new hits the same way. A connection that breaks after a hit went out may
 * have run it, so that caller gets 503 `node_unreachable` and retries, as from a node that died while
 * answering it.
 */
import http, { type IncomingHttpHeaders, type IncomingMessage } from "node:http";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import { StringDecoder } from "node:string_decoder";
import tls, { type ConnectionOptions } from "node:tls";
import type { FastifyBaseLogger } from "fastify";
import { AppError } from "../../errors.ts";
import type { ClusterStore } from "../../storage/port.ts";
import { nodeDeadAfterMs, type SourceLeases } from "./source-leases.ts";

/** The path other nodes open their forwarding connection on. */
export const forwardPath = "/_fount/forward";
/**
 * The `Upgrade` protocol of that connection: TLS with the cluster's pre-shared key, then lines of JSON.
 * Version 1 sent the lines in clear, after a token in a header; nodes of either version refuse the other.
 */
const upgradeProtocol = "fount-forward/2";
/** The identity the connecting node names its pre-shared key by: there is one, the cluster's. */
const pskIdentity = "fount-node";
/**
 * TLS 1.3 only; its suites whose hash is SHA-256, which a pre-shared key without a hash of its own
 * needs; AES-GCM first (hardware-accelerated on the machines Fount runs on).
 */
const tlsOptions = {
  minVersion: "TLSv1.3",
  ciphers: "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256",
} satisfies ConnectionOptions;

/** A node that could not be connected to gets no forwarded hit for this long. */
const unreachableForMs = 30_000;
/** How long opening a connection to another node may take before the hit runs here. */
const connectTimeoutMs = 5_000;
/** How often hits sent and not answered are checked against their deadline. */
const sweepMs = 5_000;
/** The longest line either side accepts: a 512 KB body in base64, and its headers. */
const maxLineChars = 2 * 1024 * 1024;

/** A hit another node sent on, as it came to that node (its `x-request-id` set). */
export interface ForwardedHit {
  method: string;
  /** The request target: `/e/{id}[/path][?query]`. */
  url: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** The answer of a hit: status, headers (framing ones excepted) and body. */
export interface HitAnswer {
  status: number;
  headers: Record<string, string | string[]>;
  body: string | Buffer | null;
}

/** Where a hit goes: another node, by name and URL. */
export interface ForwardTarget {
  nodeId: string;
  url: string;
}

/** A line from the forwarding node: one hit. */
interface HitFrame {
  i: number;
  m: string;
  u: string;
  h: IncomingHttpHeaders;
  /** The body in base64. */
  b: string;
}

/**
 * A line from the receiving node: the answer to hit `i` (body in base64); or `x`, it takes no hits (it
 * is shutting down); or `r`, it does not run that source (any more): it runs on node `to`, when that
 * node knows where it went, else look the holder up again. Its last line before it ends the connection
 * is `bye`: every hit it took is answered, so any other was not run.
 */
type AnswerFrame =
  | { i: number; s: number; h: Record<string, string | string[]>; b: string | null }
  | { i: number; x: true }
  | { i: number; r: true; to?: string }
  | { bye: true };

/** A node that does not run the source: the node it runs on as far as that node knows, if it knows. */
export interface Elsewhere {
  elsewhere: string | undefined;
}

/** What a node that was sent a hit made of it: its answer, or the hit was not run there. */
export type ForwardResult = HitAnswer | "not-sent" | Elsewhere;

export interface HitForwardingDeps {
  cluster: ClusterStore;
  leases: SourceLeases;
  nodeId: string;
  /** The URL another live node gave (undefined: unknown, dead, or it takes no forwarded hits). */
  peerUrl: (nodeId: string) => string | undefined;
  /** The cluster's pre-shared key for forwarding connections (from SecretBox.derive). */
  psk: Buffer;
  /** The longest a run may take: a forwarded hit waits that long and some for its answer. */
  invocationTimeoutMs: number;
  logger: FastifyBaseLogger;
}

/** The forwarding side: where each hit should run, and the connections to the other nodes. */
export class HitForwarding {
  readonly #d: HitForwardingDeps;
  /** Which node held each source's lease when last looked up. */
  readonly #holders = new Map<string, string>();
  readonly #lookups = new Map<string, Promise<ForwardTarget | undefined>>();
  /** Nodes that could not be connected to, until when they are skipped. */
  readonly #unreachable = new Map<string, number>();
  readonly #links = new Map<string, PeerLink>();
  readonly #sweep: NodeJS.Timeout;

  constructor(deps: HitForwardingDeps) {
    this.#d = deps;
    this.#sweep = setInterval(() => {
      const deadline = Date.now() - (deps.invocationTimeoutMs + 30_000);
      for (const link of this.#links.values()) link.expire(deadline);
    }, sweepMs);
    this.#sweep.unref();
  }

  /**
   * Where a hit of the source should run: another node's target, or undefined for this node (it holds
   * the lease or is taking it, no live node holds it, or the holder cannot be reached).
   */
  route(sourceId: string): ForwardTarget | undefined | Promise<ForwardTarget | undefined> {
    if (this.#d.leases.engaged(sourceId)) return undefined;
    const holder = this.#holders.get(sourceId);
    if (holder !== undefined) {
      const target = this.#target(holder);
      if (target) return target;
      this.#holders.delete(sourceId);
    }
    let lookup = this.#lookups.get(sourceId);
    if (!lookup) {
      lookup = this.#lookUp(sourceId).finally(() => this.#lookups.delete(sourceId));
      this.#lookups.set(sourceId, lookup);
    }
    return lookup;
  }

  /**
   * Sends the hit to `target` and returns its answer; `not-sent` when that node could not be sent it
   * (unreachable, or shutting down): run it here; `Elsewhere` when that node does not run the source:
   * route it again. Throws `node_unreachable` when the connection broke after the hit went out.
   */
  async forward(target: ForwardTarget, hit: ForwardedHit): Promise<ForwardResult> {
    let link = this.#links.get(target.nodeId);
    if (link?.url !== target.url) {
      link?.close();
      link = new PeerLink(target.url, this.#d.psk);
      this.#links.set(target.nodeId, link);
    }
    const sent = await link.send(hit);
    if (sent.ok) return sent.answer;
    if (sent.why === "elsewhere") return { elsewhere: sent.to };
    this.#unreachable.set(target.nodeId, Date.now() + unreachableForMs);
    // A node shutting down still answers the hits it took; it ends the connection itself.
    if (sent.why !== "declined") {
      this.#links.delete(target.nodeId);
      link.close();
      this.#d.logger.warn(
        { err: sent.err, node: target.nodeId, url: target.url },
        `cannot reach the node running a source: its hits run here for ${unreachableForMs / 1000} s (check that node's FOUNT_NODE_URL, its FOUNT_ENCRYPTION_KEY and its version)`,
      );
    }
    return "not-sent";
  }

  /** Whether a hit another node sent on should run here: this node holds the source, or is taking it. */
  runsHere(sourceId: string): boolean {
    return this.#d.leases.engaged(sourceId) || this.#d.leases.taking(sourceId);
  }

  /** The node this node last heard runs the source (another than this one), if any. */
  holderOf(sourceId: string): string | undefined {
    return this.#holders.get(sourceId);
  }

  /** Where to send node `nodeId` hits: undefined when it gave no URL, is not live, or is skipped. */
  targetOf(nodeId: string): ForwardTarget | undefined {
    return nodeId === this.#d.nodeId ? undefined : this.#target(nodeId);
  }

  /**
   * The source's lease was given back, meant for node `to` (its first asker), or the source is gone:
   * its hits go to `to` from now, or to the holder looked up again.
   */
  moved(sourceId: string, to?: string): void {
    if (to === undefined || to === this.#d.nodeId) this.#holders.delete(sourceId);
    else this.#holders.set(sourceId, to);
  }

  close(): void {
    clearInterval(this.#sweep);
    for (const link of this.#links.values()) link.close();
    this.#links.clear();
  }

  async #lookUp(sourceId: string): Promise<ForwardTarget | undefined> {
    const holder = await this.#d.cluster.sourceLeaseHolder(sourceId, nodeDeadAfterMs);
    if (holder === undefined || holder === this.#d.nodeId) return undefined;
    // This node may have begun to take it meanwhile.
    if (this.#d.leases.engaged(sourceId)) return undefined;
    const target = this.#target(holder);
    if (target) this.#holders.set(sourceId, holder);
    return target;
  }

  #target(nodeId: string): ForwardTarget | undefined {
    const until = this.#unreachable.get(nodeId);
    if (until !== undefined) {
      if (Date.now() < until) return undefined;
      this.#unreachable.delete(nodeId);
    }
    const url = this.#d.peerUrl(nodeId);
    return url === undefined ? undefined : { nodeId, url };
  }
}

type Sent =
  | { ok: true; answer: HitAnswer }
  | { ok: false; why: "unreachable" | "declined"; err?: Error }
  | { ok: false; why: "elsewhere"; to: string | undefined };

interface Pending {
  resolve: (sent: Sent) => void;
  reject: (err: AppError) => void;
  /** Written to the connection: from then on it may have run. */
  written: boolean;
  at: number;
}

/** The connection to one other node, opened on first use and again after it broke. */
class PeerLink {
  readonly url: string;
  readonly #psk: Buffer;
  #socket: Duplex | undefined;
  #connecting: Promise<Duplex> | undefined;
  readonly #pending = new Map<number, Pending>();
  #outbox: string[] = [];
  #outboxIds: number[] = [];
  #flushing = false;
  #nextId = 1;
  #closed = false;

  constructor(url: string, psk: Buffer) {
    this.url = url;
    this.#psk = psk;
  }

  async send(hit: ForwardedHit): Promise<Sent> {
    if (!this.#socket) {
      try {
        this.#connecting ??= this.#connect();
        await this.#connecting;
      } catch (err) {
        return { ok: false, why: "unreachable", err: err as Error };
      }
    }
    const id = this.#nextId++;
    const frame: HitFrame = {
      i: id,
      m: hit.method,
      u: hit.url,
      h: hit.headers,
      b: hit.body.toString("base64"),
    };
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject, written: false, at: Date.now() });
      this.#outbox.push(`${JSON.stringify(frame)}\n`);
      this.#outboxIds.push(id);
      if (!this.#flushing) {
        this.#flushing = true;
        setImmediate(() => this.#flush());
      }
    });
  }

  /** Hits written before `deadline` and still unanswered fail: the other node stalled. */
  expire(deadline: number): void {
    for (const [id, p] of this.#pending) {
      if (!p.written || p.at >= deadline) continue;
      this.#pending.delete(id);
      p.reject(cutOff());
    }
  }

  close(): void {
    this.#closed = true;
    this.#socket?.end();
    this.#gone(new Error("closed"), false);
  }

  #flush(): void {
    this.#flushing = false;
    const socket = this.#socket;
    if (!socket || this.#outbox.length === 0) return;
    socket.write(this.#outbox.length === 1 ? this.#outbox[0]! : this.#outbox.join(""));
    for (const id of this.#outboxIds) {
      const p = this.#pending.get(id);
      if (p) p.written = true;
    }
    this.#outbox = [];
    this.#outboxIds = [];
  }

  #connect(): Promise<Duplex> {
    return new Promise<Duplex>((resolve, reject) => {
      if (this.#closed) return reject(new Error("closed"));
      const req = http.request(new URL(forwardPath, this.url), {
        headers: { connection: "Upgrade", upgrade: upgradeProtocol },
        timeout: connectTimeoutMs,
      });
      req.once("upgrade", (_res, raw, head) => {
        // The other node writes nothing after its 101 until this node's TLS hello.
        if (this.#closed || head.length > 0) {
          raw.destroy();
          return reject(new Error(this.#closed ? "closed" : "it wrote before the TLS handshake"));
        }
        raw.setTimeout(0);
        raw.setNoDelay(true);
        const socket = tls.connect({
          ...tlsOptions,
          socket: raw,
          pskCallback: () => ({ psk: this.#psk, identity: pskIdentity }),
          // No certificate: the pre-shared key authenticates the other node.
          checkServerIdentity: () => undefined,
        });
        const timer = setTimeout(
          () => socket.destroy(new Error(`no TLS handshake within ${connectTimeoutMs} ms`)),
          connectTimeoutMs,
        );
        socket.once("error", (err) => {
          clearTimeout(timer);
          reject(new Error(`its TLS handshake failed (another FOUNT_ENCRYPTION_KEY?): ${err.message}`));
        });
        const closedEarly = () => {
          clearTimeout(timer);
          reject(new Error("it closed the connection during the TLS handshake"));
        };
        socket.once("close", closedEarly);
        socket.once("secureConnect", () => {
          clearTimeout(timer);
          socket.removeListener("close", closedEarly);
          socket.removeAllListeners("error");
          socket.on("error", () => undefined);
          if (this.#closed) {
            socket.destroy();
            return reject(new Error("closed"));
          }
          readLines(
            socket,
            (line) => this.#answer(line),
            () => socket.destroy(),
          );
          // A connection already given up (after `bye`, or closed here) leaves its successor alone.
          socket.once("close", () => {
            if (this.#socket === socket) this.#gone(new Error("the connection closed"), false);
          });
          this.#socket = socket;
          resolve(socket);
        });
      });
      req.once("response", (res) => {
        res.resume();
        reject(new Error(`it answered the forwarding connection with ${res.statusCode}`));
      });
      req.once("timeout", () => req.destroy(new Error(`no answer within ${connectTimeoutMs} ms`)));
      req.once("error", reject);
      req.end();
    }).finally(() => {
      this.#connecting = undefined;
    });
  }

  #answer(line: string): void {
    let frame: AnswerFrame;
    try {
      frame = JSON.parse(line) as AnswerFrame;
    } catch {
      this.#socket?.destroy();
      return;
    }
    if ("bye" in frame) {
      // The other node stops: hits not answered by now were not run there.
      this.#gone(new Error("the other node stops"), true);
      return;
    }
    const p = this.#pending.get(frame.i);
    if (!p) return;
    this.#pending.delete(frame.i);
    if ("x" in frame) p.resolve({ ok: false, why: "declined" });
    else if ("r" in frame)
      p.resolve({ ok: false, why: "elsewhere", to: typeof frame.to === "string" ? frame.to : undefined });
    else
      p.resolve({
        ok: true,
        answer: {
          status: frame.s,
          headers: frame.h,
          body: frame.b === null ? null : Buffer.from(frame.b, "base64"),
        },
      });
  }

  /**
   * The connection is given up: hits not yet written run where they came in, and so do written ones
   * when the other node said `bye` (`notRun`: it ran none of them); otherwise written ones may have run.
   */
  #gone(err: Error, notRun: boolean): void {
    this.#socket = undefined;
    this.#outbox = [];
    this.#outboxIds = [];
    for (const [id, p] of this.#pending) {
      this.#pending.delete(id);
      if (notRun) p.resolve({ ok: false, why: "declined" });
      else if (p.written) p.reject(cutOff(err));
      else p.resolve({ ok: false, why: "unreachable", err });
    }
  }
}

/** A hit that went out to another node and may have run there, but whose answer never came. */
function cutOff(cause?: Error): AppError {
  return new AppError("node_unreachable", undefined, { cause, headers: { "retry-after": "1" } });
}

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
  outbox: string[];
  flushing: boolean;
  /** `bye` was sent: nothing more is written. */
  ended: boolean;
}

/** The receiving side: forwarding connections from the other nodes, and the hits on them. */
export class ForwardedHits {
  readonly #d: ForwardedHitsDeps;
  readonly #connections = new Set<Incoming>();
  #closing = false;
  #drained: (() => void) | undefined;

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
    const remote = req.socket.remoteAddress;
    const timer = setTimeout(() => socket.destroy(), connectTimeoutMs);
    socket.once("close", () => clearTimeout(timer));
    socket.once("error", (err) => {
      clearTimeout(timer);
      this.#d.logger.warn(
        { remote, err },
        "refused a forwarding connection: its TLS handshake failed (a node with another FOUNT_ENCRYPTION_KEY?)",
      );
      socket.destroy();
    });
    socket.once("secure", () => {
      clearTimeout(timer);
      socket.removeAllListeners("error");
      socket.on("error", () => undefined);
      const conn: Incoming = { socket, running: 0, outbox: [], flushing: false, ended: false };
      this.#connections.add(conn);
      socket.once("close", () => {
        this.#connections.delete(conn);
        this.#checkDrained();
      });
      readLines(
        socket,
        (line) => this.#hit(conn, line),
        () => socket.destroy(),
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
    for (const conn of this.#connections) if (conn.running === 0 && !conn.flushing) this.#end(conn);
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

  /** Says `bye` and ends the connection: the hits it took are answered. */
  #end(conn: Incoming): void {
    if (conn.ended) return;
    conn.ended = true;
    conn.socket.end('{"bye":true}\n');
  }

  #hit(conn: Incoming, line: string): void {
    let frame: HitFrame;
    try {
      frame = JSON.parse(line) as HitFrame;
    } catch {
      conn.socket.destroy();
      return;
    }
    if (this.#closing) {
      this.#send(conn, { i: frame.i, x: true });
      return;
    }
    conn.running++;
    const hit: ForwardedHit = {
      method: frame.m,
      url: frame.u,
      headers: frame.h,
      body: Buffer.from(frame.b, "base64"),
    };
    void this.#d.serve(hit).then((answer) => {
      conn.running--;
      // An unknown node (`to` undefined) is left out of the line.
      if ("elsewhere" in answer) return this.#send(conn, { i: frame.i, r: true, to: answer.elsewhere });
      const body = answer.body === null ? null : Buffer.from(answer.body).toString("base64");
      this.#send(conn, { i: frame.i, s: answer.status, h: answer.headers, b: body });
    });
  }

  #send(conn: Incoming, frame: AnswerFrame): void {
    if (conn.ended) return;
    conn.outbox.push(`${JSON.stringify(frame)}\n`);
    if (conn.flushing) return;
    conn.flushing = true;
    setImmediate(() => {
      conn.flushing = false;
      const lines = conn.outbox;
      conn.outbox = [];
      if (lines.length > 0) conn.socket.write(lines.length === 1 ? lines[0]! : lines.join(""));
      if (this.#closing && conn.running === 0) this.#end(conn);
    });
  }

  #checkDrained(): void {
    if (this.#closing && this.#connections.size === 0) this.#drained?.();
  }
}

/** Calls `onLine` for each line read from `socket`; `onTooLong` when one passes the limit. */
function readLines(socket: Duplex, onLine: (line: string) => void, onTooLong: () => void): void {
  // Decoded here, characters split between two reads kept.
  const decoder = new StringDecoder("utf8");
  let buffered = "";
  const take = (chunk: Buffer) => {
    buffered += decoder.write(chunk);
    let start = 0;
    for (let nl = buffered.indexOf("\n"); nl !== -1; nl = buffered.indexOf("\n", start)) {
      onLine(buffered.slice(start, nl));
      start = nl + 1;
    }
    if (start > 0) buffered = buffered.slice(start);
    if (buffered.length > maxLineChars) onTooLong();
  };
  socket.on("data", take);
}
