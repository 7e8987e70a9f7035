/**
 * Small HTTP clients for the bench, so that timed calls measure the server rather than the client:
 * `node:http` with keep-alive (not fetch), and a raw connection that sends a prepared request.
 */
import http from "node:http";
import net from "node:net";

export interface HttpAnswer {
  status: number;
  text: string;
  json: any;
}

export interface CallOptions {
  method?: string;
  headers?: Record<string, string>;
  /** Sent as a JSON body. */
  json?: unknown;
  /** Sent as is with content-type application/json. */
  body?: string;
  timeoutMs?: number;
  agent?: http.Agent;
}

/** One keep-alive connection pool for the bench's own calls. */
export const keepAlive = new http.Agent({ keepAlive: true, maxSockets: 16 });

export function httpCall(url: string, o: CallOptions = {}): Promise<HttpAnswer> {
  const body = o.body ?? (o.json === undefined ? undefined : JSON.stringify(o.json));
  const headers: Record<string, string | number> = { ...(o.headers ?? {}) };
  if (body !== undefined) {
    headers["content-type"] = "application/json";
    headers["content-length"] = Buffer.byteLength(body);
  }
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      { method: o.method ?? "GET", headers, agent: o.agent ?? keepAlive, timeout: o.timeoutMs ?? 30_000 },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("error", reject);
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8");
          let json: unknown;
          try {
            json = text ? JSON.parse(text) : undefined;
          } catch {
            json = undefined;
          }
          resolve({ status: res.statusCode ?? 0, text, json });
        });
      },
    );
    req.on("timeout", () => req.destroy(new Error(`${o.method ?? "GET"} ${url} timed out`)));
    req.on("error", reject);
    req.end(body);
  });
}

/**
 * One keep-alive connection that sends the same prepared request and reads answers with a
 * content-length by hand: the time of a call with next to nothing of the client's own in it (the
 * `node:http` client above spends a few hundred µs of CPU per call on this machine). Calls one at a time.
 */
export class RawConnection {
  readonly #socket: net.Socket;
  readonly #request: Buffer;
  #text = "";
  #waiter: ((answer: string) => void) | undefined;

  private constructor(socket: net.Socket, request: Buffer) {
    this.#socket = socket;
    this.#request = request;
    socket.setEncoding("latin1").on("data", (d: string) => this.#read(d));
  }

  /** Connects to `url`'s host; each `call` sends `method url` with `headers` and the JSON `body`. */
  static async open(
    url: string,
    method: string,
    headers: Record<string, string>,
    body: string,
  ): Promise<RawConnection> {
    const u = new URL(url);
    const lines = [`${method} ${u.pathname}${u.search} HTTP/1.1`, `Host: ${u.host}`];
    for (const [name, value] of Object.entries(headers)) lines.push(`${name}: ${value}`);
    lines.push("Content-Type: application/json", `Content-Length: ${Buffer.byteLength(body)}`);
    const socket = net.connect({ host: u.hostname, port: Number(u.port) });
    socket.setNoDelay(true);
    await new Promise<void>((resolve, reject) => {
      socket.once("connect", resolve);
      socket.once("error", reject);
    });
    return new RawConnection(socket, Buffer.from(`${lines.join("\r\n")}\r\n\r\n${body}`));
  }

  /** Sends the request; resolves with the answer's head and body, as latin1 text. */
  call(): Promise<string> {
    return new Promise((resolve) => {
      this.#waiter = resolve;
      this.#socket.write(this.#request);
    });
  }

  close(): void {
    this.#socket.destroy();
  }

  #read(data: string): void {
    this.#text += data;
    const head = this.#text.indexOf("\r\n\r\n");
    if (head < 0) return;
    const length = Number(/\r\ncontent-length: *(\d+)/i.exec(this.#text.slice(0, head))?.[1] ?? 0);
    if (this.#text.length < head + 4 + length) return;
    const answer = this.#text.slice(0, head + 4 + length);
    this.#text = this.#text.slice(head + 4 + length);
    const wake = this.#waiter;
    this.#waiter = undefined;
    wake?.(answer);
  }
}
