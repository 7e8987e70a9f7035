/**
 * Sends one signed delivery over HTTP: the Standard Webhooks headers, a bounded wait, and the answer
 * sorted into success, retry or failure, with what was sent and received (attempt-record.ts).
 * Requests are dispatched to an undici Agent whose `lookup` applies the address policy at connect time
 * (those of a webhook an admin allowed private addresses to an Agent of their own without it), and the
 * answer is read by a minimal handler (answer-reader.ts) rather than through `request()`'s body stream.
 */
import type { ConnectionOptions } from "node:tls";
import { Agent } from "undici";
import { BoundedCache } from "../bounded-cache.ts";
import type { Clock } from "../clock.ts";
import type { AttemptDetail, AttemptErrorKind } from "../domain/types.ts";
import { injectHeaders, type Span, tracing } from "../tracing.ts";
import type { AddressPolicy } from "./address-guard.ts";
import { destinationRefusedCode } from "./address-guard.ts";
import { AnswerReader } from "./answer-reader.ts";
import { AttemptDeadlines } from "./attempt-deadlines.ts";
import { describeNetworkError, storableText, successResponseBytes } from "./attempt-record.ts";
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

/**
 * What a destination URL comes to, the same for every attempt to it: where undici sends the request, or
 * why no request is sent (a URL that does not parse, or an IP literal the address policy refuses).
 */
type Target =
  | { url: URL; storable: string; origin: string; path: string }
  | {
      storable: string;
      refusal: { code: "destination_refused" | "delivery_rejected"; error: string; kind: AttemptErrorKind };
    };

export class HttpSender {
  readonly #policy: AddressPolicy;
  readonly #clock: Clock;
  #agent: Agent | undefined;
  #openAgent: Agent | undefined;
  /** Per stop signal, the attempts its abort ends (`#watch`). */
  readonly #watched = new WeakMap<AbortSignal, Set<AnswerReader>>();
  readonly #tls: ConnectionOptions | undefined;
  /**
   * Targets by URL, checked against the policy (those of webhooks allowed private addresses apart):
   * parsing and checking the URL at each attempt cost about half as much as signing the message.
   */
  readonly #targets = new BoundedCache<string, Target>(1_000);
  readonly #openTargets = new BoundedCache<string, Target>(1_000);
  /** Attempts that ran out of time: their deadline ended them. */
  readonly #timedOut = new WeakSet<AnswerReader>();
  readonly #deadlines = new AttemptDeadlines<AnswerReader>((reader) => {
    this.#timedOut.add(reader);
    reader.abort(new Error("the attempt timed out"));
  });

  /** `tlsOptions` adds to Node's defaults for every TLS connection (tests pass their own `ca`). */
  constructor(policy: AddressPolicy, clock: Clock, tlsOptions?: ConnectionOptions) {
    this.#policy = policy;
    this.#clock = clock;
    this.#tls = tlsOptions;
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
    const target = this.#target(d.url, d.allowPrivate === true);
    // What the attempt records: filled in as far as it got.
    const detail: AttemptDetail = {
      url: target.storable,
      requestHeaders: null,
      responseHeaders: null,
      responseTruncated: false,
      errorKind: null,
    };
    const failed = (kind: AttemptErrorKind) => {
      detail.errorKind = kind;
      return detail;
    };
    if ("refusal" in target) {
      const { code, error, kind } = target.refusal;
      return { kind: "failed", code, error, detail: failed(kind) };
    }
    const url = target.url;
    if (stop.aborted) return { kind: "release" };
    const timestamp = Math.floor(this.#clock.now() / 1000);
    const signature = signPayload(d.secret, d.id, timestamp, d.body);
    const headers: Record<string, string> = webhookHeaders(d, timestamp, signature);
    // Only what changes between attempts is stored; the rest follows from the delivery (`webhookHeaders`).
    // Without a trace that is the timestamp and the signature, picked without walking every header.
    if (span) {
      injectHeaders(span.spanContext(), headers);
      detail.requestHeaders = attemptHeaders(headers);
    } else
      detail.requestHeaders = {
        "webhook-timestamp": headers["webhook-timestamp"]!,
        "webhook-signature": signature,
      };
    const reader = new AnswerReader();
    // One timer for all attempts (`#deadlines`); the stop signal has one listener for all its attempts (`#watch`).
    this.#deadlines.add(reader, timeoutMs);
    const watched = this.#watch(stop);
    watched.add(reader);
    try {
      // What `request()` refuses before dispatching, refused alike (a network error, retried).
      if (url.protocol !== "http:" && url.protocol !== "https:") throw invalidProtocol();
      (d.allowPrivate ? this.#openAgentInUse() : this.#agentInUse()).dispatch(
        {
          origin: target.origin,
          path: target.path,
          method: "POST",
          headers,
          body: d.body,
        },
        reader,
      );
      const res = await reader.answer;
      detail.responseHeaders = res.headers;
      // A success keeps less of its answer than a failure (`successResponseBytes`).
      const ok = res.statusCode >= 200 && res.statusCode < 300;
      const kept = ok ? Math.min(res.bodyBytes, successResponseBytes) : res.bodyBytes;
      detail.responseTruncated = res.truncated || kept < res.bodyBytes;
      const response =
        kept > 0
          ? storableText(Buffer.concat(res.body, res.bodyBytes).subarray(0, kept).toString("utf8"))
          : undefined;
      return this.#outcome(res.statusCode, res.headers, response, detail);
    } catch (err) {
      if (stop.aborted) return { kind: "release" };
      if (this.#timedOut.has(reader))
        return { kind: "retry", error: `timed out after ${timeoutMs} ms`, detail: failed("timeout") };
      const e = err as Error & { code?: string };
      if (e.code === destinationRefusedCode)
        return { kind: "failed", code: "destination_refused", error: e.message, detail: failed("guard") };
      const { error, kind } = describeNetworkError(e, url);
      return { kind: "retry", error, detail: failed(kind) };
    } finally {
      this.#deadlines.forget(reader);
      watched.delete(reader);
    }
  }

  /** Where `raw` sends to, or why it sends nothing (see `Target`), parsed and checked once per URL. */
  #target(raw: string, allowPrivate: boolean): Target {
    const cache = allowPrivate ? this.#openTargets : this.#targets;
    let target = cache.get(raw);
    if (target) return target;
    const storable = storableText(raw);
    try {
      const url = new URL(raw);
      if (!allowPrivate) this.#policy.checkUrl(url);
      target = {
        url,
        storable,
        origin: url.origin,
        path: url.search ? `${url.pathname}${url.search}` : url.pathname,
      };
    } catch (err) {
      const error = (err as Error).message;
      target =
        (err as { code?: string }).code === destinationRefusedCode
          ? { storable, refusal: { code: "destination_refused", error, kind: "guard" } }
          : { storable, refusal: { code: "delivery_rejected", error: `invalid url: ${error}`, kind: "url" } };
    }
    cache.set(raw, target);
    return target;
  }

  /** Sorts an answer into success, retry or failure. */
  #outcome(
    status: number,
    headers: Record<string, string | string[]>,
    response: string | undefined,
    detail: AttemptDetail,
  ): AttemptOutcome {
    if (status >= 200 && status < 300) return { kind: "succeeded", statusCode: status, response, detail };
    detail.errorKind = "http";
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
      const retryAfterMs = parseRetryAfter(headers["retry-after"], this.#clock.now());
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
  }

  /**
   * The attempts in flight under `stop`, which its abort ends. Each stop signal (one per dispatcher run)
   * gets one listener for all its attempts: one added and removed per attempt, as `request()`'s `signal`
   * does, cost more than the rest of an attempt's setup.
   */
  #watch(stop: AbortSignal): Set<AnswerReader> {
    const known = this.#watched.get(stop);
    if (known) return known;
    const inFlight = new Set<AnswerReader>();
    this.#watched.set(stop, inFlight);
    stop.addEventListener(
      "abort",
      () => {
        const reason = stop.reason instanceof Error ? stop.reason : new Error("the dispatcher stopped");
        for (const reader of inFlight) reader.abort(reason);
      },
      { once: true },
    );
    return inFlight;
  }

  /** The connection pool, created on first use (and again after close, so a stopped dispatcher can start again). */
  #agentInUse(): Agent {
    this.#agent ??= new Agent({
      connect: { ...this.#tls, lookup: this.#policy.lookup },
      keepAliveTimeout: 10_000,
    });
    return this.#agent;
  }

  /** The pool of webhooks allowed private addresses, created on first use. */
  #openAgentInUse(): Agent {
    this.#openAgent ??= new Agent({ connect: { ...this.#tls }, keepAliveTimeout: 10_000 });
    return this.#openAgent;
  }

  async close(): Promise<void> {
    const agents = [this.#agent, this.#openAgent];
    this.#agent = undefined;
    this.#openAgent = undefined;
    await Promise.all(agents.map((a) => a?.close()));
  }
}

/** The error undici's `request()` throws for a URL that is not HTTP, which main's sender recorded. */
function invalidProtocol(): Error {
  return Object.assign(new Error("Invalid URL protocol: the URL must start with `http:` or `https:`."), {
    code: "UND_ERR_INVALID_ARG",
  });
}
