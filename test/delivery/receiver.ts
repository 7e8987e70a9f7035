/**
 * A local HTTP receiver for delivery tests: records every request and answers as the test scripts it
 * (a status, headers, or never), plus the small components and calls the delivery tests share.
 */
import assert from "node:assert/strict";
import http, { type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach } from "node:test";
import type { TestServer } from "../helpers.ts";

export interface Received {
  headers: IncomingHttpHeaders;
  body: string;
  json: any;
}

/** What the receiver answers: a status (with headers), or `"hang"` to never answer. */
export type Answer = number | { status: number; headers?: Record<string, string>; body?: string } | "hang";

export class Receiver {
  readonly requests: Received[] = [];
  /** Decides the answer to the n-th request (0-based); default 200. */
  answer: (request: Received, n: number) => Answer = () => 200;
  readonly #server: http.Server;
  url = "";

  private constructor() {
    this.#server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const body = Buffer.concat(chunks).toString("utf8");
        let json: unknown;
        try {
          json = JSON.parse(body);
        } catch {
          json = undefined;
        }
        const received = { headers: req.headers, body, json };
        const answer = this.answer(received, this.requests.length);
        this.requests.push(received);
        if (answer === "hang") return;
        const a = typeof answer === "number" ? { status: answer } : answer;
        res.writeHead(a.status, a.headers).end(a.body ?? "ok");
      });
    });
  }

  static async start(host = "127.0.0.1"): Promise<Receiver> {
    const r = new Receiver();
    await new Promise<void>((resolve) => r.#server.listen(0, host, resolve));
    r.url = `http://${host}:${(r.#server.address() as AddressInfo).port}/hook`;
    return r;
  }

  get port(): number {
    return (this.#server.address() as AddressInfo).port;
  }

  async close(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise((resolve) => this.#server.close(resolve));
  }
}

/**
 * A maker of receivers that answer as scripted, each closed after the test that opened it, even when the
 * test fails half-way. Call it at the top of a test file (it registers the `afterEach`).
 */
export function scriptedReceivers(): (answer: Receiver["answer"]) => Promise<Receiver> {
  const opened = new Set<Receiver>();
  afterEach(async () => {
    await Promise.all([...opened].map((r) => r.close()));
    opened.clear();
  });
  return async (answer) => {
    const r = await Receiver.start();
    r.answer = answer;
    opened.add(r);
    return r;
  };
}

/** An HTTP source that emits the request body, on the channel named by `?channel=` (default otherwise). */
export const hookSourceCode = `export default {
  name: "Hook source",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  async run(event) {
    this.$emit(event.body ?? null, { name: event.query.channel, summary: "hit" });
  },
};`;

/** A listener source: emits what it was handed, wrapped, and counts its hops. */
export const relaySourceCode = `export default {
  name: "Relay",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  async run(event) {
    this.$emit({ relayed: event, hop: (event && event.hop ? event.hop : 0) + 1 });
  },
};`;

/** Deploys `code` as a source of the caller; returns its id and endpoint URL. */
export async function deploySource(
  server: TestServer,
  code: string,
  key?: string,
): Promise<{ id: string; endpoint: string }> {
  const res = await server.api("POST", "/v1/sources", { key, body: { component_code: code } });
  assert.equal(res.status, 200, res.text);
  return { id: res.body.data.id, endpoint: res.body.data.endpoint_url };
}

export async function createWebhook(
  server: TestServer,
  url: string,
  key?: string,
): Promise<{ id: string; secret: string }> {
  const res = await server.api("POST", "/v1/webhooks", { key, body: { url } });
  assert.equal(res.status, 200, res.text);
  return { id: res.body.data.id, secret: res.body.data.signing_secret };
}

export async function subscribe(
  server: TestServer,
  body: { emitter_id: string; listener_id: string; event_name?: string; backfill?: boolean },
  key?: string,
): Promise<any> {
  const res = await server.api("POST", "/v1/subscriptions", { key, body });
  assert.equal(res.status, 200, res.text);
  return res.body.data;
}

/** POSTs JSON to a source endpoint; the answer comes once the emits are stored. */
export async function emit(endpoint: string, body: unknown, channel?: string): Promise<void> {
  const url = channel === undefined ? endpoint : `${endpoint}?channel=${encodeURIComponent(channel)}`;
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  assert.equal(res.status, 200, await res.text());
  await res.arrayBuffer().catch(() => undefined);
}

/** The webhook's deliveries, newest first (up to 100). */
export async function deliveries(server: TestServer, webhookId: string, key?: string): Promise<any[]> {
  const res = await server.api("GET", `/v1/webhooks/${webhookId}/deliveries?limit=100`, { key });
  assert.equal(res.status, 200, res.text);
  return res.body.data;
}

/** Event entries of one channel of a source or workflow, newest first, untruncated. */
export async function entries(
  server: TestServer,
  path: string,
  channel?: string,
  key?: string,
): Promise<any[]> {
  const q = channel === undefined ? "" : `&event_name=${encodeURIComponent(channel)}`;
  const res = await server.api("GET", `${path}/event_summaries?expand=event&limit=100${q}`, { key });
  assert.equal(res.status, 200, res.text);
  return res.body.data;
}

/** A receiver that holds every request until `open()`, then answers 200 (to keep deliveries in flight). */
export class Gate {
  readonly bodies: string[] = [];
  waiting = 0;
  #open = false;
  readonly #held: http.ServerResponse[] = [];
  readonly #server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => {
      body += c.toString("utf8");
    });
    req.on("end", () => {
      this.bodies.push(body);
      if (this.#open) res.end("ok");
      else {
        this.waiting++;
        this.#held.push(res);
      }
    });
  });
  url = "";

  static async start(): Promise<Gate> {
    const g = new Gate();
    await new Promise<void>((resolve) => g.#server.listen(0, "127.0.0.1", resolve));
    g.url = `http://127.0.0.1:${(g.#server.address() as AddressInfo).port}/hook`;
    return g;
  }

  open(): void {
    this.#open = true;
    for (const res of this.#held.splice(0)) res.end("ok");
    this.waiting = 0;
  }

  async close(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise((resolve) => this.#server.close(resolve));
  }
}
