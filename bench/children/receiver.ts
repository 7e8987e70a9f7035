/**
 * The webhook receiver: a node:http server in its own process that answers every POST with 200 at once
 * and records, per delivery, its receipt time against the `emitted_at` (set by the component when it
 * emitted) and `sent_at` (set by the load generator when it sent the request) found in the body.
 * IPC: `ready` → port; `count`; `reset`; `report` → every latency.
 */
import { bodyServer } from "./body-server.ts";
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

const server = bodyServer((req, bytes, res) => {
  const now = Date.now();
  res.writeHead(200, { "content-type": "text/plain", "content-length": 2 }).end("ok");
  const body = bytes.toString("utf8");
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

serve({
  ready: server.ready,
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
