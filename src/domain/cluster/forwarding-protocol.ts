/**
 * The forwarding connection between two nodes, as both ends speak it (hit-forwarding.ts tells why hits
 * are forwarded): an HTTP upgrade of `GET /_fount/forward`, then TLS 1.3 with the cluster's pre-shared
 * key, then frames — hits one way (`HitMeta`), answers the other (`AnswerMeta`), matched by a number.
 * A frame is a fixed header (the lengths of what follows), metadata as JSON and the body's raw bytes.
 * The sending end is peer-link.ts, the receiving end forwarded-hits.ts.
 */
import type { IncomingHttpHeaders } from "node:http";
import type { Duplex } from "node:stream";
import type { ConnectionOptions } from "node:tls";

/** The path other nodes open their forwarding connection on. */
export const forwardPath = "/_fount/forward";
/**
 * The `Upgrade` protocol of that connection: TLS with the cluster's pre-shared key, then frames.
 * Version 1 sent lines of JSON in clear, after a token in a header; version 2 the same lines in TLS,
 * bodies in base64. Nodes of different versions refuse each other's upgrade (400): hits run where they
 * arrive until every node speaks the same.
 */
export const upgradeProtocol = "fount-forward/3";
/**
 * The header of the upgrade request that names the connecting node, so that the other node knows where
 * the hits on the connection came in (placement.ts). Only a placement hint: it is believed once the TLS
 * handshake proved that the other end has the cluster's key.
 */
export const nodeHeader = "x-fount-node";
/** The identity the connecting node names its pre-shared key by: there is one, the cluster's. */
export const pskIdentity = "fount-node";
/**
 * TLS 1.3 only; its suites whose hash is SHA-256, which a pre-shared key without a hash of its own
 * needs; AES-GCM first (hardware-accelerated on the machines Fount runs on).
 */
export const tlsOptions = {
  minVersion: "TLSv1.3",
  ciphers: "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256",
} satisfies ConnectionOptions;

/** How long opening a connection to another node may take before the hit runs here (its TLS handshake too). */
export const connectTimeoutMs = 5_000;

/** A hit another node sent on, as it came to that node (its `x-request-id` set). */
export interface ForwardedHit {
  method: string;
  /** The request target: `/e/{id}[/path][?query]`. */
  url: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
  /**
   * With traces on at the sending node: its span of the hit (tracing.ts, `contextText`), the parent of the
   * receiving node's. Not a header: the source sees the caller's headers as they came.
   */
  trace?: string | undefined;
  /** The node that sent it on (the connection's `nodeHeader`), when it said. */
  from?: string | undefined;
}

/** The answer of a hit: status, headers (framing ones excepted) and body. */
export interface HitAnswer {
  status: number;
  headers: Record<string, string | string[]>;
  body: string | Buffer | null;
}

/** The metadata of a frame from the forwarding node: one hit (its body is the frame's body). */
export interface HitMeta {
  i: number;
  m: string;
  u: string;
  h: IncomingHttpHeaders;
  /** `ForwardedHit.trace`, when there is one (a node that does not trace ignores it). */
  t?: string;
}

/**
 * The hit a frame from the forwarding node holds, or why it holds none (the connection is then given up,
 * as for bytes that are not a frame): `i` a safe integer, `m` a method, `u` an endpoint's request target,
 * `h` headers (an object of strings or lists of strings), and a body, empty or not (only answers have none).
 */
export function hitOf(meta: Record<string, unknown>, body: Buffer | null): HitMeta | string {
  const { i, m, u, h, t } = meta;
  if (!Number.isSafeInteger(i)) return "a hit frame without a number (`i`)";
  if (typeof m !== "string" || !/^[!#$%&'*+.^`|~\w-]{1,32}$/.test(m))
    return "a hit frame without a method (`m`)";
  if (typeof u !== "string" || !u.startsWith("/e/")) return "a hit frame without an endpoint path (`u`)";
  if (!isHeaders(h)) return "a hit frame without headers (`h`)";
  if (body === null) return "a hit frame without a body";
  const hit: HitMeta = { i: i as number, m, u, h };
  // A node that does not trace ignores a span it cannot read, as one that traces ignores a missing one.
  if (typeof t === "string") hit.t = t;
  return hit;
}

/** Headers as a hit's frame carries them (`IncomingHttpHeaders`): a plain object of strings or lists of them. */
function isHeaders(h: unknown): h is IncomingHttpHeaders {
  if (typeof h !== "object" || h === null || Array.isArray(h)) return false;
  for (const v of Object.values(h))
    if (typeof v !== "string" && !(Array.isArray(v) && v.every((x) => typeof x === "string"))) return false;
  return true;
}

/**
 * The metadata of a frame from the receiving node: the answer to hit `i` (its body the frame's, none
 * for a null body); or `x`, it takes no hits (it is shutting down); or `r`, it does not run that source
 * (any more): it runs on node `to`, when that node knows where it went, else look the holder up again.
 * Its last frame before it ends the connection is `bye`: every hit it took is answered, so any other
 * was not run.
 */
export type AnswerMeta =
  | { i: number; s: number; h: Record<string, string | string[]> }
  | { i: number; x: true }
  | { i: number; r: true; to?: string }
  | { bye: true };

/** A node that does not run the source: the node it runs on as far as that node knows, if it knows. */
export interface Elsewhere {
  elsewhere: string | undefined;
}

/** The bytes before a frame's metadata: its length, then its body's, both unsigned 32-bit big-endian. */
const headerBytes = 8;
/** The body length that says the frame has no body (an answer with a null body), where 0 is an empty one. */
const noBody = 0xffff_ffff;
/**
 * The largest frame either side takes (metadata and body): a hit's body is at most 512 KB
 * (`endpointBodyLimit`) and its headers at most 16 KB; an answer's body has no limit of its own, so the
 * receiving node sends an error in place of an answer that would not fit (forwarded-hits.ts). A frame
 * past this ends the connection, as the 2 MB line of version 2 did.
 */
export const maxFrameBytes = 2 * 1024 * 1024;

/**
 * Frames queued to go out together, laid out in one buffer when they go: one write, one TLS record
 * (up to 16 KB) for many hits under load. A frame is the header, the metadata as JSON, then the body's
 * bytes as they are (version 2 sent them in base64 inside the JSON: a third more bytes, and an encoding
 * and a decoding of every body).
 */
export class Outbox {
  #metas: string[] = [];
  #bodies: Array<string | Buffer | null> = [];
  /** Each frame's metadata and body lengths in bytes, in turn. */
  #sizes: number[] = [];
  #total = 0;

  get size(): number {
    return this.#metas.length;
  }

  /**
   * Queues a frame; false, and nothing queued, when it is past `maxFrameBytes`: the other end would
   * refuse it and give up the connection, and with it every hit on it.
   */
  add(meta: HitMeta | AnswerMeta, body: string | Buffer | null): boolean {
    const json = JSON.stringify(meta);
    const metaBytes = Buffer.byteLength(json);
    const bodyBytes = body === null ? 0 : typeof body === "string" ? Buffer.byteLength(body) : body.length;
    if (metaBytes + bodyBytes > maxFrameBytes) return false;
    this.#metas.push(json);
    this.#bodies.push(body);
    this.#sizes.push(metaBytes, bodyBytes);
    this.#total += headerBytes + metaBytes + bodyBytes;
    return true;
  }

  /** The frames queued, in one buffer; the outbox is empty again. */
  take(): Buffer {
    const metas = this.#metas;
    const bodies = this.#bodies;
    // Measured as they were queued, so that the frames are written once, each where it goes.
    const sizes = this.#sizes;
    const out = Buffer.allocUnsafe(this.#total);
    this.#metas = [];
    this.#bodies = [];
    this.#sizes = [];
    this.#total = 0;
    let at = 0;
    for (let k = 0; k < metas.length; k++) {
      const body = bodies[k]!;
      const metaBytes = sizes[2 * k]!;
      const bodyBytes = sizes[2 * k + 1]!;
      out.writeUInt32BE(metaBytes, at);
      out.writeUInt32BE(body === null ? noBody : bodyBytes, at + 4);
      out.write(metas[k]!, at + headerBytes, metaBytes, "utf8");
      at += headerBytes + metaBytes;
      if (typeof body === "string") out.write(body, at, bodyBytes, "utf8");
      else body?.copy(out, at);
      at += bodyBytes;
    }
    return out;
  }
}

/** One frame alone (`Outbox` lays out several); throws when it is past the limit. */
export function encodeFrame(meta: HitMeta | AnswerMeta, body: string | Buffer | null): Buffer {
  const one = new Outbox();
  if (!one.add(meta, body)) throw new RangeError(`a frame past the limit of ${maxFrameBytes} bytes`);
  return one.take();
}

/**
 * Cuts frames out of the bytes read from a connection, as they come: split anywhere, or several in one
 * read. A frame's size is known from its header, so one past the limit is refused before its bytes come.
 */
export class FrameReader {
  readonly #onFrame: (meta: unknown, body: Buffer | null) => void;
  /** Bytes of a frame not yet complete, in the order read. */
  #parts: Buffer[] = [];
  #partBytes = 0;
  /** How many bytes the frame begun in `#parts` needs in all (its header, until that is read). */
  #need = headerBytes;

  constructor(onFrame: (meta: unknown, body: Buffer | null) => void) {
    this.#onFrame = onFrame;
  }

  /** The bytes of a frame begun and not finished: at the connection's end, a frame cut off. */
  get pending(): number {
    return this.#partBytes;
  }

  /** Takes the next bytes read; returns why the connection must end when they break the protocol. */
  push(chunk: Buffer): string | undefined {
    let bytes = chunk;
    if (this.#partBytes > 0) {
      this.#parts.push(chunk);
      this.#partBytes += chunk.length;
      // Joined once the frame is whole, so a large body read in many pieces is copied once.
      if (this.#partBytes < this.#need) return undefined;
      bytes = Buffer.concat(this.#parts, this.#partBytes);
      this.#parts = [];
      this.#partBytes = 0;
    }
    let at = 0;
    let need = headerBytes;
    while (bytes.length - at >= headerBytes) {
      const metaBytes = bytes.readUInt32BE(at);
      const bodyField = bytes.readUInt32BE(at + 4);
      const bodyBytes = bodyField === noBody ? 0 : bodyField;
      if (metaBytes + bodyBytes > maxFrameBytes)
        return `a frame of ${metaBytes + bodyBytes} bytes, past the limit of ${maxFrameBytes}`;
      const bodyAt = at + headerBytes + metaBytes;
      if (bytes.length < bodyAt + bodyBytes) {
        need = headerBytes + metaBytes + bodyBytes;
        break;
      }
      let meta: unknown;
      try {
        meta = JSON.parse(bytes.toString("utf8", at + headerBytes, bodyAt));
      } catch {
        return "a frame whose metadata is not JSON";
      }
      // Both ends look fields up in it.
      if (typeof meta !== "object" || meta === null) return "a frame whose metadata is not a JSON object";
      let body: Buffer | null = null;
      if (bodyField !== noBody) {
        // A copy: a view would keep the whole read (up to 64 KB) alive as long as the hit runs.
        body = Buffer.allocUnsafe(bodyBytes);
        bytes.copy(body, 0, bodyAt, bodyAt + bodyBytes);
      }
      at = bodyAt + bodyBytes;
      this.#onFrame(meta, body);
    }
    if (at < bytes.length) {
      this.#parts = [bytes.subarray(at)];
      this.#partBytes = bytes.length - at;
    }
    this.#need = need;
    return undefined;
  }
}

/**
 * Calls `onFrame` for each frame read from `socket`; `onBroken`, and reads no more, when the bytes break
 * the protocol (a frame past the limit, metadata that is not JSON). The reader tells what is left at the end.
 */
export function readFrames(
  socket: Duplex,
  onFrame: (meta: unknown, body: Buffer | null) => void,
  onBroken: (reason: string) => void,
): FrameReader {
  const reader = new FrameReader(onFrame);
  const take = (chunk: Buffer) => {
    const broken = reader.push(chunk);
    if (broken === undefined) return;
    socket.removeListener("data", take);
    onBroken(broken);
  };
  socket.on("data", take);
  return reader;
}
