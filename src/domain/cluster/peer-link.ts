/**
 * The sending end of hit forwarding: the connection from this node to one other node, opened on first
 * use (the HTTP upgrade, then the TLS handshake with the cluster's pre-shared key) and again after it
 * broke. Hits queued in one turn of the event loop go out in one write; answers come back in any order.
 */
import http from "node:http";
import type { Duplex } from "node:stream";
import tls from "node:tls";
import { AppError } from "../../errors.ts";
import {
  type AnswerMeta,
  connectTimeoutMs,
  type ForwardedHit,
  forwardPath,
  type HitAnswer,
  type HitMeta,
  nodeHeader,
  Outbox,
  pskIdentity,
  readFrames,
  tlsOptions,
  upgradeProtocol,
} from "./forwarding-protocol.ts";

/** What became of a hit sent on a link: its answer, or why it was not run there. */
export type Sent =
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
export class PeerLink {
  readonly url: string;
  readonly #psk: Buffer;
  /** This node's ID, told to the other node when the connection opens (where its hits come from). */
  readonly #from: string;
  #socket: Duplex | undefined;
  #connecting: Promise<Duplex> | undefined;
  readonly #pending = new Map<number, Pending>();
  #outbox = new Outbox();
  #outboxIds: number[] = [];
  #flushing = false;
  #nextId = 1;
  #closed = false;

  constructor(url: string, psk: Buffer, from: string) {
    this.url = url;
    this.#psk = psk;
    this.#from = from;
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
    const meta: HitMeta = { i: id, m: hit.method, u: hit.url, h: hit.headers };
    if (hit.trace !== undefined) meta.t = hit.trace;
    return new Promise((resolve, reject) => {
      // Past the frame limit only with headers larger than the HTTP parser takes: nothing goes out.
      if (!this.#outbox.add(meta, hit.body)) return reject(new AppError("payload_too_large"));
      this.#pending.set(id, { resolve, reject, written: false, at: Date.now() });
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
    if (!socket || this.#outbox.size === 0) return;
    if (socket.readableEnded || !socket.writable) {
      // The other node ended the connection (a node killed ends it through its kernel; one that stops
      // says `bye` first), and its close is still to come here. Written now, these hits would count as
      // gone out and maybe run there (503); no process there will read them, so they run here instead.
      this.#gone(new Error("the other node ended the connection"), false);
      return;
    }
    socket.write(this.#outbox.take());
    for (const id of this.#outboxIds) {
      const p = this.#pending.get(id);
      if (p) p.written = true;
    }
    this.#outboxIds = [];
  }

  #connect(): Promise<Duplex> {
    return new Promise<Duplex>((resolve, reject) => {
      if (this.#closed) return reject(new Error("closed"));
      const req = http.request(new URL(forwardPath, this.url), {
        headers: { connection: "Upgrade", upgrade: upgradeProtocol, [nodeHeader]: this.#from },
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
          // The pre-shared key alone authenticates the other node. An end that answers the hello with a
          // certificate instead (one the machine's CAs trust, and NODE_TLS_REJECT_UNAUTHORIZED=0 trusts
          // any) has not shown the key: TLS calls this only for such a handshake, and it fails it.
          rejectUnauthorized: true,
          checkServerIdentity: () => new Error(notKeyed),
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
          if (!keyed(socket)) {
            socket.destroy();
            return reject(new Error(notKeyed));
          }
          if (this.#closed) {
            socket.destroy();
            return reject(new Error("closed"));
          }
          const reader = readFrames(
            socket,
            (meta, body) => this.#answer(meta as AnswerMeta, body),
            (reason) => {
              if (this.#socket === socket) this.#gone(new Error(`the other node sent ${reason}`), false);
              socket.destroy();
            },
          );
          // A connection already given up (after `bye`, or closed here) leaves its successor alone.
          socket.once("close", () => {
            if (this.#socket !== socket) return;
            const cut = reader.pending > 0 ? " in the middle of a frame" : "";
            this.#gone(new Error(`the connection closed${cut}`), false);
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

  #answer(frame: AnswerMeta, body: Buffer | null): void {
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
        answer: { status: frame.s, headers: frame.h, body },
      });
  }

  /**
   * The connection is given up: hits not yet written run where they came in, and so do written ones
   * when the other node said `bye` (`notRun`: it ran none of them); otherwise written ones may have run.
   */
  #gone(err: Error, notRun: boolean): void {
    this.#socket = undefined;
    this.#outbox = new Outbox();
    this.#outboxIds = [];
    for (const [id, p] of this.#pending) {
      this.#pending.delete(id);
      if (notRun) p.resolve({ ok: false, why: "declined" });
      else if (p.written) p.reject(cutOff(err));
      else p.resolve({ ok: false, why: "unreachable", err });
    }
  }
}

/** Why a connection whose other end showed a certificate, not the cluster's key, is refused. */
const notKeyed =
  "it presented a certificate instead of proving the cluster's key (not a node of this cluster?)";

/**
 * A handshake on the pre-shared key: TLS 1.3 runs it as the resumption of a session (the key stands for
 * one), and no certificate comes with it. Checked once more after the handshake, whatever TLS decided.
 */
function keyed(socket: tls.TLSSocket): boolean {
  return socket.isSessionReused() && Object.keys(socket.getPeerCertificate()).length === 0;
}

/** A hit that went out to another node and may have run there, but whose answer never came. */
function cutOff(cause?: Error): AppError {
  return new AppError("node_unreachable", undefined, { cause, headers: { "retry-after": "1" } });
}
