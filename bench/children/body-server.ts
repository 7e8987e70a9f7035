/**
 * What the bench's HTTP receivers share: a node:http server on a free loopback port that reads each
 * request's whole body before handing it over, with connections kept open a minute (the load keeps them
 * busy), and the `ready` IPC answer that names its port.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";

/** Serves on 127.0.0.1 (a free port): `take` gets each request with its body, and answers it. */
export function bodyServer(
  take: (req: http.IncomingMessage, body: Buffer, res: http.ServerResponse) => void,
): { ready: () => Promise<{ port: number }> } {
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => take(req, Buffer.concat(chunks), res));
  });
  server.keepAliveTimeout = 60_000;
  const listening = new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    ready: async () => {
      await listening;
      return { port: (server.address() as AddressInfo).port };
    },
  };
}
