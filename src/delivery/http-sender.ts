/**
 * Sends one signed delivery over HTTP: the Standard Webhooks headers, a bounded wait, and the answer
 * sorted into success, retry or failure. Connections go through an undici Agent whose `lookup` applies
 * the address policy at connect time; those of a webhook an admin allowed private addresses go through
 * an Agent of their own without it.
 */
import type { Readable } from "node:stream";
import { Agent, request } from "undici";
import type { Clock } from "../clock.ts";
import { injectHeaders, type Span, tracing } from "../tracing.ts";
import type { AddressPolicy } from "./address-guard.ts";
import { destinationRefusedCode } from "./address-guard.ts";
import { endAttempt, startHttpAttempt } from "./attempt-span.ts";
import type { AttemptOutcome } from "./outcome.ts";
import { parseRetryAfter } from "./schedule.ts";
import { signPayload } from "./signature.ts";

export const userAgent = "Fount-Webhooks/1";

/** Response bytes kept with an attempt, for diagnosis. */
const keptResponseBytes = 512;
/** Response bytes read at most; the rest is dropped with the connection. */
const readResponseBytes = 64 * 1024;

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
    let url: URL;
    try {
      url = new URL(d.url);
      if (!d.allowPrivate) this.#policy.checkUrl(url);
    } catch (err) {
      if ((err as { code?: string }).code === destinationRefusedCode) {
        return { kind: "failed", code: "destination_refused", error: (err as Error).message };
      }
      return { kind: "failed", code: "delivery_rejected", error: `invalid url: ${(err as Error).message}` };
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
    const headers: Record<string, string> = {
      "content-type": "application/json",
      "user-agent": userAgent,
      "webhook-id": d.id,
      "webhook-timestamp": String(timestamp),
      "webhook-signature": signPayload(d.secret, d.id, timestamp, d.body),
      "x-fount-emitter-id": d.emitterId,
      "x-fount-event-name": d.channel === "" ? "default" : d.channel,
      "x-fount-event-id": d.eventId,
    };
    if (span) injectHeaders(span.spanContext(), headers);
    try {
      const res = await request(url, {
        method: "POST",
        dispatcher: d.allowPrivate ? this.#openAgentInUse() : this.#agentInUse(),
        signal: abort.signal,
        headers,
        body: d.body,
      });
      const response = await readSome(res.body);
      const status = res.statusCode;
      if (status >= 200 && status < 300) return { kind: "succeeded", statusCode: status, response };
      if (status === 410) {
        return {
          kind: "failed",
          code: "webhook_gone",
          statusCode: status,
          response,
          deactivate: true,
          error: "HTTP 410 Gone",
        };
      }
      if ((status >= 300 && status < 400) || status === 408 || status === 429 || status >= 500) {
        const retryAfterMs = parseRetryAfter(res.headers["retry-after"], this.#clock.now());
        return { kind: "retry", statusCode: status, response, retryAfterMs, error: `HTTP ${status}` };
      }
      return {
        kind: "failed",
        code: "delivery_rejected",
        statusCode: status,
        response,
        error: `HTTP ${status}`,
      };
    } catch (err) {
      if (stop.aborted) return { kind: "release" };
      if (timedOut) return { kind: "retry", error: `timed out after ${timeoutMs} ms` };
      const e = err as Error & { code?: string };
      if (e.code === destinationRefusedCode)
        return { kind: "failed", code: "destination_refused", error: e.message };
      return { kind: "retry", error: `network error: ${e.code ? `${e.code} ` : ""}${e.message}` };
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

/** The start of a response body as text; reading stops after a bound. */
function readSome(body: Readable): Promise<string | undefined> {
  return new Promise((resolve, reject) => {
    const kept: Buffer[] = [];
    let keptBytes = 0;
    let read = 0;
    const done = () => resolve(keptBytes > 0 ? Buffer.concat(kept).toString("utf8") : undefined);
    body.on("data", (chunk: Buffer) => {
      if (keptBytes < keptResponseBytes) {
        kept.push(chunk.subarray(0, keptResponseBytes - keptBytes));
        keptBytes += Math.min(chunk.length, keptResponseBytes - keptBytes);
      }
      read += chunk.length;
      if (read > readResponseBytes) {
        body.destroy();
        done();
      }
    });
    body.on("end", done);
    body.on("error", reject);
  });
}
