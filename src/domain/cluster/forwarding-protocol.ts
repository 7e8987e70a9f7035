/**
 * The forwarding connection between two nodes, as both ends speak it (hit-forwarding.ts tells why hits
 * are forwarded): an HTTP upgrade of `GET /_fount/forward`, then TLS 1.3 with the cluster's pre-shared
 * key, then lines of JSON — hits one way (`HitFrame`), answers the other (`AnswerFrame`), matched by a
 * number. The sending end is peer-link.ts, the receiving end forwarded-hits.ts.
 */
import type { IncomingHttpHeaders } from "node:http";
import type { Duplex } from "node:stream";
import { StringDecoder } from "node:string_decoder";
import type { ConnectionOptions } from "node:tls";

/** The path other nodes open their forwarding connection on. */
export const forwardPath = "/_fount/forward";
/**
 * The `Upgrade` protocol of that connection: TLS with the cluster's pre-shared key, then lines of JSON.
 * Version 1 sent the lines in clear, after a token in a header; nodes of either version refuse the other.
 */
export const upgradeProtocol = "fount-forward/2";
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
/** The longest line either side accepts: a 512 KB body in base64, and its headers. */
const maxLineChars = 2 * 1024 * 1024;

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

/** A line from the forwarding node: one hit. */
export interface HitFrame {
  i: number;
  m: string;
  u: string;
  h: IncomingHttpHeaders;
  /** The body in base64. */
  b: string;
  /** `ForwardedHit.trace`, when there is one (a node that does not trace ignores it). */
  t?: string;
}

/**
 * A line from the receiving node: the answer to hit `i` (body in base64); or `x`, it takes no hits (it
 * is shutting down); or `r`, it does not run that source (any more): it runs on node `to`, when that
 * node knows where it went, else look the holder up again. Its last line before it ends the connection
 * is `bye`: every hit it took is answered, so any other was not run.
 */
export type AnswerFrame =
  | { i: number; s: number; h: Record<string, string | string[]>; b: string | null }
  | { i: number; x: true }
  | { i: number; r: true; to?: string }
  | { bye: true };

/** A node that does not run the source: the node it runs on as far as that node knows, if it knows. */
export interface Elsewhere {
  elsewhere: string | undefined;
}

/** Calls `onLine` for each line read from `socket`; `onTooLong` when one passes the limit. */
export function readLines(socket: Duplex, onLine: (line: string) => void, onTooLong: () => void): void {
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
