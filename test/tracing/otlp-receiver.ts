/**
 * A local OTLP/HTTP receiver for trace tests: takes `POST /v1/traces` as the exporter sends it (JSON,
 * `ExportTraceServiceRequest`), keeps each span in a plain form, and answers 200 as a collector does. Its
 * spans can be awaited by a test (`waitFor`), since a batch arrives whenever the SDK sends it.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";

/** A span as the test reads it: IDs in hex, kind as OTLP numbers it (1 internal, 2 server, 3 client). */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** "" for the first span of a trace. */
  parentSpanId: string;
  name: string;
  kind: number;
  attributes: Record<string, Attribute>;
  /** 0 unset, 1 ok, 2 error. */
  status: number;
  /** The status's message ("" when none). */
  statusMessage: string;
  /** The resource's attributes (service.name…). */
  resource: Record<string, Attribute>;
}

/** An attribute's value: OTLP's `AnyValue`, unwrapped. */
export type Attribute = string | number | boolean | Attribute[];

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  boolValue?: boolean;
  doubleValue?: number;
  arrayValue?: { values?: OtlpValue[] };
}

function unwrap(value: OtlpValue): Attribute {
  if (value.arrayValue) return (value.arrayValue.values ?? []).map(unwrap);
  if (value.intValue !== undefined) return Number(value.intValue);
  return value.stringValue ?? value.boolValue ?? value.doubleValue ?? "";
}

function plain(list: { key: string; value: OtlpValue }[] | undefined): ReceivedSpan["attributes"] {
  const out: ReceivedSpan["attributes"] = {};
  for (const { key, value } of list ?? []) out[key] = unwrap(value);
  return out;
}

export class OtlpReceiver {
  readonly spans: ReceivedSpan[] = [];
  /** Content types of the requests received. */
  readonly contentTypes: string[] = [];
  readonly #server: http.Server;
  readonly #waiting = new Set<() => void>();

  private constructor() {
    this.#server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        this.contentTypes.push(String(req.headers["content-type"]));
        if (req.method !== "POST" || req.url !== "/v1/traces") {
          res.writeHead(404).end();
          return;
        }
        const body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
        for (const rs of body.resourceSpans ?? []) {
          const resource = plain(rs.resource?.attributes);
          for (const ss of rs.scopeSpans ?? [])
            for (const s of ss.spans ?? [])
              this.spans.push({
                traceId: s.traceId,
                spanId: s.spanId,
                parentSpanId: s.parentSpanId ?? "",
                name: s.name,
                kind: s.kind,
                attributes: plain(s.attributes),
                status: s.status?.code ?? 0,
                statusMessage: s.status?.message ?? "",
                resource,
              });
        }
        res.writeHead(200, { "content-type": "application/json" }).end("{}");
        for (const wake of this.#waiting) wake();
      });
    });
  }

  static async start(): Promise<OtlpReceiver> {
    const r = new OtlpReceiver();
    await new Promise<void>((resolve) => r.#server.listen(0, "127.0.0.1", resolve));
    return r;
  }

  /** The base URL, as OTEL_EXPORTER_OTLP_ENDPOINT takes it (the exporter adds `/v1/traces`). */
  get url(): string {
    return `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }

  /** Resolves once `found` finds what it looks for among the spans received; fails after `timeoutMs`. */
  async waitFor<T>(found: (spans: ReceivedSpan[]) => T | undefined, timeoutMs = 30_000): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const got = found(this.spans);
      if (got !== undefined) return got;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`not received in ${timeoutMs} ms; spans: ${this.describe()}`);
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          this.#waiting.delete(wake);
          resolve();
        };
        const timer = setTimeout(wake, Math.min(left, 500));
        this.#waiting.add(wake);
      });
    }
  }

  /** The spans received, one line each, for a failure's message. */
  describe(): string {
    return this.spans
      .map(
        (s) => `\n  ${s.name} ${s.traceId}/${s.spanId} <- ${s.parentSpanId} ${JSON.stringify(s.attributes)}`,
      )
      .join("");
  }

  async close(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise((resolve) => this.#server.close(resolve));
  }
}
