/**
 * A small HTTP server that plays a broken or hostile Fount server for CLI tests: each test gives the
 * handler, which answers as it likes (bodies without end, answers that stall, names full of escapes).
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tempHome } from "./run.ts";

export type Handler = (req: http.IncomingMessage, res: http.ServerResponse, url: URL) => void;

export class HostileServer {
  readonly #server: http.Server;
  url = "";

  private constructor(handler: Handler) {
    this.#server = http.createServer((req, res) => {
      // A client that leaves mid-answer is what these tests make happen.
      res.on("error", () => {});
      handler(req, res, new URL(req.url ?? "/", "http://localhost"));
    });
  }

  static async start(handler: Handler): Promise<HostileServer> {
    const s = new HostileServer(handler);
    await new Promise<void>((resolve) => s.#server.listen(0, "127.0.0.1", resolve));
    s.url = `http://127.0.0.1:${(s.#server.address() as AddressInfo).port}`;
    return s;
  }

  /** The environment of a `fount` that talks to this server, with a home of its own. */
  env(): Record<string, string> {
    const { home, configPath } = tempHome();
    return { HOME: home, FOUNT_CONFIG: configPath, FOUNT_URL: this.url, FOUNT_API_KEY: "fnt_hostile" };
  }

  async close(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise((resolve) => this.#server.close(resolve));
  }
}

/** Answers `body` as JSON with `status`. */
export function json(res: http.ServerResponse, body: unknown, status = 200): void {
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
}

/**
 * Writes `chunk` again and again while the client reads, `maxBytes` in all, then ends the answer (or
 * leaves it open with `stall`): an answer "without end" that still cannot fill this machine's memory
 * when the client under test has no limit.
 */
export function flood(res: http.ServerResponse, chunk: string, maxBytes: number, stall = false): void {
  const bytes = Buffer.from(chunk);
  let sent = 0;
  const more = () => {
    while (sent < maxBytes) {
      sent += bytes.length;
      if (!res.write(bytes)) return void res.once("drain", more);
    }
    if (!stall) res.end();
  };
  res.on("close", () => {
    sent = Number.POSITIVE_INFINITY;
  });
  more();
}

/** A source as the API renders it, enough for the CLI to resolve it by its ID. */
export const hostileSource = { id: "dc_hostile1", name_slug: "hostile", name: "hostile" };
