/**
 * The baseline: a bare node:http server that takes the same JSON POST as a source endpoint, parses it
 * and answers `{"success":true,"id":n}`, with nothing stored. Answers IPC `ready` with its port.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { serve } from "./ipc.ts";

let n = 0;
const server = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (c: Buffer) => chunks.push(c));
  req.on("end", () => {
    let status = 200;
    try {
      JSON.parse(Buffer.concat(chunks).toString("utf8"));
    } catch {
      status = 400;
    }
    const body = JSON.stringify(status === 200 ? { success: true, id: ++n } : { error: "invalid json" });
    res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
    res.end(body);
  });
});
const listening = new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));

serve({
  ready: async () => {
    await listening;
    return { port: (server.address() as AddressInfo).port };
  },
});
