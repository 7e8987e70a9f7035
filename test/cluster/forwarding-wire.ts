/**
 * The forwarding line as another node speaks it, for the cluster tests that write its bytes themselves:
 * the cluster's key, a connection opened with it, and frames written on it with the answers read back.
 */
import assert from "node:assert/strict";
import http from "node:http";
import tls from "node:tls";
import { SecretBox } from "../../src/crypto/secret-box.ts";
import { FrameReader } from "../../src/domain/cluster/forwarding-protocol.ts";
import type { Cluster, Node } from "./nodes.ts";

/** The forwarding connections' TLS key, as every node derives it from the cluster's FOUNT_ENCRYPTION_KEY. */
export function clusterPsk(cluster: Cluster): Buffer {
  const box = new SecretBox(Buffer.from(cluster.encryptionKey, "base64"));
  return Buffer.from(box.derive("fount/forwarding-psk/v2"), "base64url");
}

/** Opens a forwarding connection to `n` as another node would: the upgrade, then TLS keyed with `psk`. */
export function openForwarding(n: Node, psk: Buffer): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    const req = http.request(new URL("/_fount/forward", n.url), {
      headers: { connection: "Upgrade", upgrade: "fount-forward/3" },
    });
    req.once("response", (res) => reject(new Error(`no upgrade: ${res.statusCode}`)));
    req.once("error", reject);
    req.once("upgrade", (res, raw) => {
      assert.equal(res.statusCode, 101);
      const socket = tls.connect({
        socket: raw,
        minVersion: "TLSv1.3",
        pskCallback: () => ({ psk, identity: "fount-node" }),
        checkServerIdentity: () => undefined,
      });
      socket.once("secureConnect", () => resolve(socket));
      socket.once("error", reject);
      socket.once("close", () => reject(new Error("closed during the TLS handshake")));
    });
    req.end();
  });
}

/**
 * Opens a forwarding connection to `n` with `psk` as another node would, writes `bytes`, and collects
 * the answer frames' metadata until `answers` have come or the node ends the connection.
 */
export async function forwardRaw(
  n: Node,
  psk: Buffer,
  bytes: Buffer,
  answers: number,
): Promise<{ frames: unknown[]; ended: boolean }> {
  const socket = await openForwarding(n, psk);
  return new Promise((resolve) => {
    const frames: unknown[] = [];
    const done = (ended: boolean) => {
      socket.destroy();
      resolve({ frames, ended });
    };
    const reader = new FrameReader((meta) => frames.push(meta));
    socket.on("data", (chunk: Buffer) => {
      assert.equal(reader.push(chunk), undefined);
      if (frames.length >= answers) done(false);
    });
    socket.once("close", () => done(true));
    socket.on("error", () => undefined);
    socket.write(bytes);
  });
}
