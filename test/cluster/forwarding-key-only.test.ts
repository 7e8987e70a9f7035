/**
 * The sending end of a forwarding connection (src/domain/cluster/peer-link.ts) believes the cluster's
 * pre-shared key and nothing else: an end that answers its TLS hello with a certificate, even one that
 * chains to a CA this machine trusts, is refused before a hit goes out to it (it could read the hit and
 * forge the answer without FOUNT_ENCRYPTION_KEY), while a node with the key is still reached.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import http from "node:http";
import type { Socket } from "node:net";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import tls from "node:tls";
import pino from "pino";
import { ForwardedHits } from "../../src/domain/cluster/forwarded-hits.ts";
import {
  encodeFrame,
  FrameReader,
  forwardPath,
  type HitMeta,
  pskIdentity,
  tlsOptions,
  upgradeProtocol,
} from "../../src/domain/cluster/forwarding-protocol.ts";
import { PeerLink } from "../../src/domain/cluster/peer-link.ts";

// A test CA, and a certificate it signed for the impostor, made with the openssl CLI.
const dir = mkdtempSync(path.join(os.tmpdir(), "fount-forward-ca-"));
const file = (name: string) => path.join(dir, name);
const openssl = (...args: string[]) => execFileSync("openssl", args, { stdio: "ignore" });
const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
openssl(
  ...["req", "-x509", ...ec, "-days", "1", "-subj", "/CN=Test CA"],
  ...["-keyout", file("ca.key"), "-out", file("ca.pem")],
);
openssl("req", ...ec, "-subj", "/CN=impostor.test", "-keyout", file("leaf.key"), "-out", file("leaf.csr"));
openssl(
  ...["x509", "-req", "-in", file("leaf.csr"), "-CA", file("ca.pem"), "-CAkey", file("ca.key")],
  ...["-CAcreateserial", "-days", "1", "-out", file("leaf.pem")],
);
const ca = readFileSync(file("ca.pem"), "utf8");
const key = readFileSync(file("leaf.key"));
const cert = readFileSync(file("leaf.pem"));
rmSync(dir, { recursive: true, force: true });
// As if the CA were in the machine's store (a public CA, or one a company installs): this process trusts it.
tls.setDefaultCACertificates([...tls.getCACertificates("default"), ca]);

const psk = randomBytes(32);

/** The hits the impostor read; it answers each with a forged 200. */
const readByImpostor: HitMeta[] = [];
const impostor = http.createServer((_req, res) => res.end());
impostor.on("upgrade", (_req, raw: Socket) => {
  raw.write(`HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: ${upgradeProtocol}\r\n\r\n`);
  // Without the key, it answers the hello with its certificate.
  const socket = new tls.TLSSocket(raw, { ...tlsOptions, isServer: true, key, cert });
  socket.on("error", () => undefined);
  // The upgraded socket keeps the HTTP server's half-open setting: this end closes when the link does.
  socket.on("end", () => socket.end());
  const reader = new FrameReader((meta) => {
    const hit = meta as HitMeta;
    readByImpostor.push(hit);
    socket.write(encodeFrame({ i: hit.i, s: 200, h: {} }, "forged"));
  });
  socket.on("data", (chunk: Buffer) => reader.push(chunk));
});

/** A node with the key. */
const node = new ForwardedHits({
  psk,
  serve: async (hit) => ({ status: 201, headers: {}, body: `ran ${hit.url}` }),
  logger: pino({ level: "silent" }),
});
const server = http.createServer((_req, res) => res.end());
server.on("upgrade", (req, raw: Socket, head: Buffer) => {
  if (!node.accept(req, raw, head)) raw.destroy();
});

const urlOf = async (s: http.Server) => {
  await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(s.address() as { port: number }).port}`;
};
const impostorUrl = await urlOf(impostor);
const nodeUrl = await urlOf(server);
after(async () => {
  await node.close(1_000);
  server.close();
  impostor.close();
});

const hit = { method: "POST", url: "/e/abc", headers: { "x-request-id": "r1" }, body: Buffer.from("secret") };

test("the impostor's certificate is one this process trusts", async () => {
  // What the link did before: the key offered, a certificate that chains to a trusted CA taken instead.
  const authorized = await new Promise<boolean>((resolve, reject) => {
    const req = http.request(new URL(forwardPath, impostorUrl), {
      headers: { connection: "Upgrade", upgrade: upgradeProtocol },
    });
    req.once("upgrade", (_res, raw) => {
      const socket = tls.connect({
        ...tlsOptions,
        socket: raw,
        pskCallback: () => ({ psk, identity: pskIdentity }),
        checkServerIdentity: () => undefined,
      });
      socket.once("secureConnect", () => {
        resolve(socket.authorized);
        socket.destroy();
      });
      socket.once("error", reject);
    });
    req.once("error", reject);
    req.end();
  });
  assert.equal(authorized, true);
});

test("a link refuses an end that shows a trusted certificate instead of the key, and sends it nothing", async () => {
  const link = new PeerLink(impostorUrl, psk, "n1");
  const sent = await link.send(hit);
  link.close();
  assert.equal(sent.ok, false, `the impostor answered: ${JSON.stringify(sent)}`);
  assert.equal(sent.why, "unreachable");
  assert.match((sent as { err: Error }).err.message, /certificate instead of proving the cluster's key/);
  assert.deepEqual(readByImpostor, []);
});

test("a link still reaches a node with the key", async () => {
  const link = new PeerLink(nodeUrl, psk, "n1");
  const sent = await link.send(hit);
  link.close();
  assert.ok(sent.ok, JSON.stringify(sent));
  assert.equal(sent.answer.status, 201);
  assert.equal(String(sent.answer.body), "ran /e/abc");
});
