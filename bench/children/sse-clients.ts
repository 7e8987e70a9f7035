/**
 * A share of the SSE clients: raw `GET /sources/{id}/sse` connections with the API key, one socket
 * each, whose `data:` lines are scanned for the `emitted_at` and `sent_at` the events carry. Kept raw
 * (no EventSource library, and no `http` client either: sockets read with `onread` into one shared
 * buffer, the response taken apart by hand) so that a few processes can hold 1,000 streams and still
 * cost less CPU per event than the server they measure; on a 2-core machine they share its cores.
 * IPC: `ready`; `open` {url, key, count, concurrency} → how many connected; `reset`; `report`; `close`.
 */
import net from "node:net";
import { serve } from "./ipc.ts";
import { numberAfter } from "./stamps.ts";

interface Client {
  socket: net.Socket;
  received: number;
  closed: boolean;
}

const clients: Client[] = [];
let emitLatencies: number[] = [];
let sendLatencies: number[] = [];
/** Every socket reads into this buffer; each read is taken apart before the next one. */
const readBuffer = Buffer.allocUnsafe(256 * 1024);

/**
 * Opens one stream; resolves once the server's opening comment arrived. The body is read as latin1 text
 * (the stamps are ASCII digits) and split at blank lines; the chunk sizes of the chunked encoding stay
 * in it, before a frame's `id:` line, where they change nothing that is looked for.
 */
function openOne(url: URL, key: string, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let opened = false;
    /** Set once the response's head is read. */
    let inBody = false;
    let text = "";
    const client: Client = { socket: undefined as unknown as net.Socket, received: 0, closed: false };
    const fail = (err: Error) => {
      clearTimeout(timer);
      client.socket.destroy();
      if (!opened) reject(err);
    };
    const onBytes = (n: number): void => {
      const now = Date.now();
      text += readBuffer.toString("latin1", 0, n);
      if (!inBody) {
        const end = text.indexOf("\r\n\r\n");
        if (end < 0) return;
        const status = text.slice(9, 12);
        if (status !== "200") {
          fail(new Error(`HTTP ${status}`));
          return;
        }
        inBody = true;
        text = text.slice(end + 4);
      }
      let start = 0;
      let end = text.indexOf("\n\n");
      while (end >= 0) {
        const frame = text.slice(start, end);
        start = end + 2;
        end = text.indexOf("\n\n", start);
        if (!opened) {
          opened = true;
          clearTimeout(timer);
          clients.push(client);
          resolve();
        }
        if (frame.indexOf("\ndata:") < 0 && !frame.startsWith("data:")) continue;
        client.received++;
        const emitted = numberAfter(frame, "emitted_at");
        const sent = numberAfter(frame, "sent_at");
        if (emitted !== undefined) emitLatencies.push(now - emitted);
        if (sent !== undefined) sendLatencies.push(now - sent);
      }
      text = start === 0 ? text : text.slice(start);
    };
    client.socket = net.connect({
      host: url.hostname,
      port: Number(url.port),
      onread: {
        buffer: readBuffer,
        callback: (n) => {
          onBytes(n);
          return true;
        },
      },
    });
    const timer = setTimeout(() => fail(new Error("no opening comment in time")), timeoutMs);
    client.socket.setNoDelay(true);
    client.socket.write(
      `GET ${url.pathname}${url.search} HTTP/1.1\r\nHost: ${url.host}\r\n` +
        `Authorization: Bearer ${key}\r\nAccept: text/event-stream\r\n\r\n`,
    );
    client.socket.on("close", () => {
      client.closed = true;
      if (!opened) fail(new Error("closed before the opening comment"));
    });
    client.socket.on("error", (err) => fail(err));
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
          await openOne(new URL(url), key, 10_000);
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
    for (const c of clients) c.socket.destroy();
    return {};
  },
});
