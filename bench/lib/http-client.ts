/** A small HTTP client on node:http with keep-alive, so that timed calls measure the server and not fetch. */
import http from "node:http";

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
