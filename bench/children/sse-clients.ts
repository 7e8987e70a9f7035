/**
 * A share of the SSE clients: raw `GET /sources/{id}/sse` connections with the API key, one socket
 * each, whose `data:` lines are scanned for the `emitted_at` and `sent_at` the events carry. Kept raw
 * (no EventSource library) so that a few processes can hold 1,000 streams without being the bottleneck.
 * IPC: `ready`; `open` {url, key, count, concurrency} → how many connected; `reset`; `report`; `close`.
 */
import http from "node:http";
import { serve } from "./ipc.ts";
import { numberAfter } from "./stamps.ts";

interface Client {
  request: http.ClientRequest;
  received: number;
  closed: boolean;
}

const clients: Client[] = [];
let emitLatencies: number[] = [];
let sendLatencies: number[] = [];

/** Opens one stream; resolves once the server's opening comment arrived. */
function openOne(url: string, key: string, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const client: Client = {
      request: undefined as unknown as http.ClientRequest,
      received: 0,
      closed: false,
    };
    let opened = false;
    const timer = setTimeout(() => {
      if (!opened) client.request.destroy(new Error("no opening comment in time"));
    }, timeoutMs);
    client.request = http.get(
      url,
      { agent: false, headers: { authorization: `Bearer ${key}`, accept: "text/event-stream" } },
      (res) => {
        if (res.statusCode !== 200) {
          res.resume();
          clearTimeout(timer);
          reject(new Error(`HTTP ${res.statusCode}`));
          return;
        }
        res.setEncoding("utf8");
        let buffer = "";
        res.on("data", (chunk: string) => {
          const now = Date.now();
          buffer += chunk;
          let end = buffer.indexOf("\n\n");
          while (end >= 0) {
            const frame = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            end = buffer.indexOf("\n\n");
            if (!opened) {
              opened = true;
              clearTimeout(timer);
              clients.push(client);
              resolve();
            }
            const data = frame.indexOf("\ndata:") >= 0 || frame.startsWith("data:") ? frame : undefined;
            if (data === undefined) continue;
            client.received++;
            const emitted = numberAfter(data, "emitted_at");
            const sent = numberAfter(data, "sent_at");
            if (emitted !== undefined) emitLatencies.push(now - emitted);
            if (sent !== undefined) sendLatencies.push(now - sent);
          }
        });
        res.on("close", () => {
          client.closed = true;
        });
      },
    );
    client.request.on("error", (err) => {
      client.closed = true;
      clearTimeout(timer);
      if (!opened) reject(err);
    });
  });
}

serve({
  ready: () => ({}),
  open: async (m) => {
    const { url, key, count, concurrency } = m as {
      url: string;
      key: string;
      count: number;
      concurrency: number;
    };
    const started = performance.now();
    let connected = 0;
    const errors: string[] = [];
    let next = 0;
    // A bounded number of handshakes at once, so the server's accept backlog never overflows.
    const worker = async () => {
      while (next < count) {
        next++;
        try {
          await openOne(url, key, 10_000);
          connected++;
        } catch (err) {
          if (errors.length < 5) errors.push((err as Error).message);
        }
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
    return { connected, errors, ms: performance.now() - started };
  },
  reset: () => {
    emitLatencies = [];
    sendLatencies = [];
    for (const c of clients) c.received = 0;
  },
  report: () => ({
    clients: clients.length,
    open: clients.filter((c) => !c.closed).length,
    received: clients.map((c) => c.received),
    emitLatencies,
    sendLatencies,
  }),
  close: () => {
    for (const c of clients) c.request.destroy();
    return {};
  },
});
