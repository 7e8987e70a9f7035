/**
 * Sends one signed delivery over HTTP: the Standard Webhooks headers, a bounded wait, and the answer
 * sorted into success, retry or failure, with what was sent and received (attempt-record.ts).
 * Connections go through an undici Agent whose `lookup` applies the address policy at connect time;
 * those of a webhook an admin allowed private addresses go through an Agent of their own without it.
 */
import type { Readable } from "node:stream";
import { Agent, request } from "undici";
import type { Clock } from "../clock.ts";
import type { AttemptDetail, AttemptErrorKind } from "../domain/types.ts";
import { injectHeaders, type Span, tracing } from "../tracing.ts";
import type { AddressPolicy } from "./address-guard.ts";
import { destinationRefusedCode } from "./address-guard.ts";
import { attemptResponseBytes, describeNetworkError, storableText } from "./attempt-record.ts";
import { endAttempt, startHttpAttempt } from "./attempt-span.ts";
import type { AttemptOutcome } from "./outcome.ts";
import { parseRetryAfter } from "./schedule.ts";
import { signPayload } from "./signature.ts";

export const userAgent = "Fount-Webhooks/1";

export interface OutgoingDelivery {
  url: string;
  /** `whsec_…`. */
  secret: string;
  /** `webhook-id`: the delivery ID, the same on every attempt so receivers can deduplicate. */
  id: string;
  emitterId: string;
  eventId: string;
  channel: string;
  /** The JSON body. */
  body: string;
  /** An admin allowed this webhook loopback and private addresses: the address policy does not apply. */
  allowPrivate?: boolean;
  /** 1 for the first attempt (traces). */
  attempt: number;
  /** The span the event was stored under (`Delivery.trace`): the attempt's span continues its trace. */
  trace?: string | undefined;
}

/** What names a delivery in its request's headers. */
export interface DeliveryNames {
  /** `webhook-id`: the delivery ID. */
  id: string;
  emitterId: string;
  eventId: string;
  channel: string;
}

/**
 * The headers of a delivery's request: the Standard Webhooks ones and Fount's (a trace adds its own).
 * Also how an attempt's headers are shown again (`sentHeaders`), from the delivery and what the attempt
 * stored of them.
 */
export function webhookHeaders(d: DeliveryNames, timestamp: number | string, signature: string) {
  return {
    "content-type": "application/json",
    "user-agent": userAgent,
    "webhook-id": d.id,
    "webhook-timestamp": String(timestamp),
    "webhook-signature": signature,
    "x-fount-emitter-id": d.emitterId,
    "x-fount-event-name": d.channel === "" ? "default" : d.channel,
    "x-fount-event-id": d.eventId,
  };
}

/** Headers of every attempt of a delivery alike, which `webhookHeaders` gives again from the delivery. */
const deliveryHeaderNames = new Set([
  "content-type",
  "user-agent",
  "webhook-id",
  "x-fount-emitter-id",
  "x-fount-event-name",
  "x-fount-event-id",
]);

/** What an attempt stores of its request's headers: those that change between attempts (timestamp, signature, trace). */
function attemptHeaders(headers: Record<string, string>): Record<string, string> {
  const own: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) if (!deliveryHeaderNames.has(name)) own[name] = value;
  return own;
}

/**
 * The headers an attempt of `d` sent: the delivery's own, and what the attempt stored (its timestamp,
 * signature and trace); null when it sent no request or stored none.
 */
export function sentHeaders(
  d: DeliveryNames,
  stored: Record<string, string> | null | undefined,
): Record<string, string> | null {
  if (!stored) return null;
  return {
    ...webhookHeaders(d, stored["webhook-timestamp"] ?? "", stored["webhook-signature"] ?? ""),
    ...stored,
  };
}

export class HttpSender {
  readonly #policy: AddressPolicy;
  readonly #clock: Clock;
  #agent: Agent | undefined;
  #openAgent: Agent | undefined;

  constructor(policy: AddressPolicy, clock: Clock) {
    this.#policy = policy;
    this.#clock = clock;
  }

  /** Makes one attempt; with traces on, in a span of its own, sent on as the request's `traceparent`. */
  async send(d: OutgoingDelivery, timeoutMs: number, stop: AbortSignal): Promise<AttemptOutcome> {
    if (!tracing.on) return this.#send(d, timeoutMs, stop, undefined);
    const span = startHttpAttempt(d);
    let outcome: AttemptOutcome = { kind: "retry", error: "the attempt threw" };
    try {
      outcome = await this.#send(d, timeoutMs, stop, span);
      return outcome;
    } finally {
      endAttempt(span, outcome);
    }
  }

  async #send(
    d: OutgoingDelivery,
    timeoutMs: number,
    stop: AbortSignal,
    span: Span | undefined,
  ): Promise<AttemptOutcome> {
    // What the attempt records: filled in as far as it got.
    const detail: AttemptDetail = {
      url: storableText(d.url),
      requestHeaders: null,
      responseHeaders: null,
      responseTruncated: false,
      errorKind: null,
    };
    const failed = (kind: AttemptErrorKind) => {
      detail.errorKind = kind;
      return detail;
    };
    let url: URL;
    try {
      url = new URL(d.url);
      if (!d.allowPrivate) this.#policy.checkUrl(url);
    } catch (err) {
      if ((err as { code?: string }).code === destinationRefusedCode) {
        const error = (err as Error).message;
        return { kind: "failed", code: "destination_refused", error, detail: failed("guard") };
      }
      const error = `invalid url: ${(err as Error).message}`;
      return { kind: "failed", code: "delivery_rejected", error, detail: failed("url") };
    }
    const timestamp = Math.floor(this.#clock.now() / 1000);
    // One controller and one timer per attempt: AbortSignal.timeout/any cost more than the request.
    const abort = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      abort.abort(new Error(`timed out after ${timeoutMs} ms`));
    }, timeoutMs);
    const onStop = () => abort.abort(stop.reason);
    if (stop.aborted) onStop();
    else stop.addEventListener("abort", onStop, { once: true });
    const signature = signPayload(d.secret, d.id, timestamp, d.body);
    const headers: Record<string, string> = webhookHeaders(d, timestamp, signature);
    if (span) injectHeaders(span.spanContext(), headers);
    // Only what changes between attempts is stored; the rest follows from the delivery (`webhookHeaders`).
    detail.requestHeaders = attemptHeaders(headers);
    try {
      const res = await request(url, {
        method: "POST",
        dispatcher: d.allowPrivate ? this.#openAgentInUse() : this.#agentInUse(),
        signal: abort.signal,
        headers,
        body: d.body,
      });
      detail.responseHeaders = res.headers as Record<string, string | string[]>;
      const { text: response, truncated } = await readSome(res.body);
      detail.responseTruncated = truncated;
      const status = res.statusCode;
      if (status >= 200 && status < 300) return { kind: "succeeded", statusCode: status, response, detail };
      failed("http");
      if (status === 410) {
        return {
          kind: "failed",
          code: "webhook_gone",
          statusCode: status,
          response,
          deactivate: true,
          error: "HTTP 410 Gone",
          detail,
        };
      }
      if ((status >= 300 && status < 400) || status === 408 || status === 429 || status >= 500) {
        const retryAfterMs = parseRetryAfter(res.headers["retry-after"], this.#clock.now());
        return { kind: "retry", statusCode: status, response, retryAfterMs, error: `HTTP ${status}`, detail };
      }
      return {
        kind: "failed",
        code: "delivery_rejected",
        statusCode: status,
        response,
        error: `HTTP ${status}`,
        detail,
      };
    } catch (err) {
      if (stop.aborted) return { kind: "release" };
      if (timedOut)
        return { kind: "retry", error: `timed out after ${timeoutMs} ms`, detail: failed("timeout") };
      const e = err as Error & { code?: string };
      if (e.code === destinationRefusedCode)
        return { kind: "failed", code: "destination_refused", error: e.message, detail: failed("guard") };
      const { error, kind } = describeNetworkError(e, url);
      return { kind: "retry", error, detail: failed(kind) };
    } finally {
      clearTimeout(timer);
      stop.removeEventListener("abort", onStop);
    }
  }

  /** The connection pool, created on first use (and again after close, so a stopped dispatcher can start again). */
  #agentInUse(): Agent {
    this.#agent ??= new Agent({ connect: { lookup: this.#policy.lookup }, keepAliveTimeout: 10_000 });
    return this.#agent;
  }

  /** The pool of webhooks allowed private addresses, created on first use. */
  #openAgentInUse(): Agent {
    this.#openAgent ??= new Agent({ keepAliveTimeout: 10_000 });
    return this.#openAgent;
  }

  async close(): Promise<void> {
    const agents = [this.#agent, this.#openAgent];
    this.#agent = undefined;
    this.#openAgent = undefined;
    await Promise.all(agents.map((a) => a?.close()));
  }
}

/**
 * The start of a response body as text (`attemptResponseBytes` of it, made storable), and whether there
 * was more; reading stops after the bound, and the rest is dropped with the connection.
 */
function readSome(body: Readable): Promise<{ text: string | undefined; truncated: boolean }> {
  return new Promise((resolve, reject) => {
    const kept: Buffer[] = [];
    let keptBytes = 0;
    let read = 0;
    const done = () =>
      resolve({
        text: keptBytes > 0 ? storableText(Buffer.concat(kept).toString("utf8")) : undefined,
        truncated: read > keptBytes,
      });
    body.on("data", (chunk: Buffer) => {
      if (keptBytes < attemptResponseBytes) {
        kept.push(chunk.subarray(0, attemptResponseBytes - keptBytes));
        keptBytes += Math.min(chunk.length, attemptResponseBytes - keptBytes);
      }
      read += chunk.length;
      if (read > attemptResponseBytes) {
        body.destroy();
        done();
      }
    });
    body.on("end", done);
    body.on("error", reject);
  });
}
