/**
 * The webhook receiver: a node:http server in its own process that answers every POST with 200 at once
 * and records, per delivery, its receipt time against the `emitted_at` (set by the component when it
 * emitted) and `sent_at` (set by the load generator when it sent the request) found in the body.
 * IPC: `ready` → port; `count`; `reset`; `report` → every latency.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { serve } from "./ipc.ts";
import { numberAfter } from "./stamps.ts";

let count = 0;
let firstMs = 0;
let lastMs = 0;
let emitLatencies: number[] = [];
let sendLatencies: number[] = [];
let ids = new Set<string>();
let duplicates = 0;
let unparsed = 0;

const server = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (c: Buffer) => chunks.push(c));
  req.on("end", () => {
    const now = Date.now();
    res.writeHead(200, { "content-type": "text/plain", "content-length": 2 }).end("ok");
    const body = Buffer.concat(chunks).toString("utf8");
    count++;
    if (firstMs === 0) firstMs = now;
    lastMs = now;
    const id = String(req.headers["webhook-id"] ?? "");
    if (ids.has(id)) duplicates++;
    else ids.add(id);
    const emitted = numberAfter(body, "emitted_at");
    const sent = numberAfter(body, "sent_at");
    if (emitted === undefined) unparsed++;
    else emitLatencies.push(now - emitted);
    if (sent !== undefined) sendLatencies.push(now - sent);
  });
});
server.keepAliveTimeout = 60_000;
const listening = new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));

serve({
  ready: async () => {
    await listening;
    return { port: (server.address() as AddressInfo).port };
  },
  count: () => ({ count }),
  reset: () => {
    count = 0;
    firstMs = 0;
    lastMs = 0;
    emitLatencies = [];
    sendLatencies = [];
    ids = new Set();
    duplicates = 0;
    unparsed = 0;
  },
  report: () => ({
    count,
    unique: ids.size,
    duplicates,
    unparsed,
    firstMs,
    lastMs,
    emitLatencies,
    sendLatencies,
  }),
});
