/**
 * The CPU of the forwarding line alone (src/domain/cluster/peer-link.ts to forwarded-hits.ts): this
 * process sends hits on a `PeerLink`, as a node forwarding them, to a child process that takes them on a
 * `ForwardedHits` and answers each at once, as the bench's emitter source does (`{"success":true}`), with
 * no HTTP, store or run around them. Prints each process's CPU per hit, user and system: what one
 * forwarded hit costs the two nodes in encoding, TLS, system calls and decoding, with far less noise than
 * `bench/cluster-cpu.ts`, where the line is a few per cent of a hit.
 *
 *   node bench/forward-line.ts [--hits 20000] [--concurrency 1] [--body-bytes 0]
 *
 * `--concurrency` hits are kept in flight (1: each write carries one frame, as at a moderate rate);
 * `--body-bytes` sends a body of that many bytes instead of the bench's ~200-byte JSON payload.
 * It uses only the classes' constructors, `send`, `accept` and `close`, so it runs on older versions of
 * the line as well (copy it into their tree) to compare them.
 */
import { fork } from "node:child_process";
import { randomBytes } from "node:crypto";
import http from "node:http";
import { parseArgs } from "node:util";
import pino from "pino";
import { ForwardedHits } from "../src/domain/cluster/forwarded-hits.ts";
import { PeerLink } from "../src/domain/cluster/peer-link.ts";
import { payloadText } from "./parts/context.ts";

const { values } = parseArgs({
  options: {
    hits: { type: "string", default: "20000" },
    concurrency: { type: "string", default: "1" },
    "body-bytes": { type: "string", default: "0" },
    receiver: { type: "string" },
  },
});

/** CPU of this process so far, user and system, in µs. */
const cpu = () => process.cpuUsage();

if (values.receiver !== undefined) {
  // The receiving node: answers every hit as the endpoint route answers an emitter's.
  const hits = new ForwardedHits({
    psk: Buffer.from(values.receiver, "hex"),
    logger: pino({ level: "silent" }),
    serve: async (hit) => ({
      status: 200,
      headers: { "x-request-id": String(hit.headers["x-request-id"]), "content-type": "application/json" },
      body: '{"success":true}',
    }),
  });
  const server = http.createServer((_req, res) => res.end());
  server.on("upgrade", (req, socket, head) => {
    if (!hits.accept(req, socket, head)) socket.destroy();
  });
  server.listen(0, "127.0.0.1", () => {
    const { port } = server.address() as { port: number };
    process.send?.({ port });
  });
  process.on("message", (m: string) => {
    if (m === "cpu") process.send?.({ cpu: cpu() });
    if (m === "stop") process.exit(0);
  });
} else {
  const total = Number(values.hits);
  const concurrency = Number(values.concurrency);
  const bodyBytes = Number(values["body-bytes"]);
  const body = bodyBytes > 0 ? randomBytes(bodyBytes) : Buffer.from(payloadText);
  const psk = randomBytes(32);
  const child = fork(import.meta.filename, ["--receiver", psk.toString("hex")]);
  const ask = <T>(m: string | undefined, key: string) =>
    new Promise<T>((resolve) => {
      const on = (reply: Record<string, unknown>) => {
        if (!(key in reply)) return;
        child.off("message", on);
        resolve(reply[key] as T);
      };
      child.on("message", on);
      if (m) child.send(m);
    });
  const port = await ask<number>(undefined, "port");
  const link = new PeerLink(`http://127.0.0.1:${port}`, psk, "bench-sender");
  const hit = {
    method: "POST",
    url: "/e/abcdefghijklmnop",
    headers: {
      host: "127.0.0.1:40123",
      "content-type": bodyBytes > 0 ? "application/octet-stream" : "application/json",
      "content-length": String(body.length),
      "x-request-id": "req-8f7a6b5c4d3e2f10",
    },
    body,
  };
  const run = async (n: number) => {
    let next = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next++ < n) {
          const sent = await link.send(hit);
          if (!sent.ok) throw new Error(`a hit was not answered: ${sent.why}`);
        }
      }),
    );
  };
  // Warm-up: the connection, its TLS handshake and the JIT.
  await run(Math.min(5_000, total));
  const [sender0, receiver0] = [cpu(), await ask<NodeJS.CpuUsage>("cpu", "cpu")];
  const started = performance.now();
  await run(total);
  const seconds = (performance.now() - started) / 1000;
  const [sender1, receiver1] = [cpu(), await ask<NodeJS.CpuUsage>("cpu", "cpu")];
  const per = (a: NodeJS.CpuUsage, b: NodeJS.CpuUsage) =>
    `${((b.user + b.system - a.user - a.system) / total).toFixed(1)} µs/hit (user ${((b.user - a.user) / total).toFixed(1)}, system ${((b.system - a.system) / total).toFixed(1)})`;
  console.log(
    `${total} hits of ${body.length} bytes, ${concurrency} in flight: ${Math.round(total / seconds)}/s`,
  );
  console.log(`sending node    ${per(sender0, sender1)}`);
  console.log(`receiving node  ${per(receiver0, receiver1)}`);
  link.close();
  child.send("stop");
}
