/**
 * A collector that keeps nothing: takes OTLP/HTTP trace exports (`POST /v1/traces`, JSON), counts the
 * spans in them and answers 200, so the bench measures what traces cost the server that sends them.
 * IPC: `ready` → port; `count` → requests and spans received.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { serve } from "./ipc.ts";

let requests = 0;
let spans = 0;

const server = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (c: Buffer) => chunks.push(c));
  req.on("end", () => {
    requests++;
    try {
      const body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      for (const rs of body.resourceSpans ?? [])
        for (const ss of rs.scopeSpans ?? []) spans += ss.spans?.length ?? 0;
    } catch {
      // Not JSON: counted as a request only.
    }
    res.writeHead(200, { "content-type": "application/json", "content-length": 2 }).end("{}");
  });
});
server.keepAliveTimeout = 60_000;
const listening = new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));

serve({
  ready: async () => {
    await listening;
    return { port: (server.address() as AddressInfo).port };
  },
  count: () => ({ requests, spans }),
});
