/**
 * How a delivery reaches each kind of listener. `prepare` looks the listener up and names the
 * destination (for the per-host limit), or settles the delivery at once without an attempt; `send`
 * makes the attempt.
 */
import { BoundedCache } from "../bounded-cache.ts";
import type { SecretBox } from "../crypto/secret-box.ts";
import type { QuotaHold, SourceRunner } from "../domain/sources/runner.ts";
import type { Delivery, ListenerKind, Webhook } from "../domain/types.ts";
import type { AppError } from "../errors.ts";
import type { Storage } from "../storage/port.ts";
import { tracing } from "../tracing.ts";
import { endAttempt, startSourceAttempt } from "./attempt-span.ts";
import type { HttpSender } from "./http-sender.ts";
import type { AttemptOutcome } from "./outcome.ts";
import { deliveryContext, maxSourceHops } from "./routing.ts";
import { parseRetryAfter } from "./schedule.ts";

export interface PreparedDelivery {
  /** Deliveries with the same key share the per-destination concurrency limit. */
  key: string;
  send(options: { timeoutMs: number; stop: AbortSignal; nowMs: number }): Promise<AttemptOutcome>;
}

export interface Deliverer {
  prepare(d: Delivery): Promise<PreparedDelivery | AttemptOutcome>;
}

const deleted = (what: string): AttemptOutcome => ({
  kind: "failed",
  code: "listener_deleted",
  error: `the ${what} no longer exists`,
  attempted: false,
  report: false,
});

/** Webhooks and external workflows: a signed POST of the event data to their URL. */
export class HttpDeliverer implements Deliverer {
  readonly #store: Storage;
  readonly #secrets: SecretBox;
  readonly #sender: HttpSender;

  /** Destination key (`http:<host>`) by URL. */
  readonly #keys = new BoundedCache<string, string>(1_000);
  /** Opened signing secrets by sealed value (a new secret is a new sealed value). */
  readonly #opened = new BoundedCache<string, string>(1_000);
  /** Webhook reads issued in the current turn of the event loop, by ID (see `#webhook`). */
  readonly #reads = new Map<string, Promise<Webhook | undefined>>();

  constructor(store: Storage, secrets: SecretBox, sender: HttpSender) {
    this.#store = store;
    this.#secrets = secrets;
    this.#sender = sender;
  }

  /**
   * The webhook, read from the store for this delivery. Deliveries started in the same turn of the
   * event loop (those of one group commit) share one read: still a read made after each of them
   * started, so a change committed before a delivery starts is always seen by it, for one query
   * instead of one per delivery.
   */
  #webhook(id: string): Promise<Webhook | undefined> {
    let read = this.#reads.get(id);
    if (!read) {
      if (this.#reads.size === 0) queueMicrotask(() => this.#reads.clear());
      read = this.#store.getWebhook(id);
      this.#reads.set(id, read);
    }
    return read;
  }

  async prepare(d: Delivery): Promise<PreparedDelivery | AttemptOutcome> {
    let url: string;
    let sealed: string;
    let allowPrivate = false;
    if (d.listenerKind === "webhook") {
      const webhook = await this.#webhook(d.listenerId);
      if (!webhook) return deleted("webhook");
      // Deactivated since the claim: the delivery waits, like the others of an inactive webhook.
      if (!webhook.active) return { kind: "release" };
      url = webhook.url;
      sealed = webhook.signingSecretSealed;
      allowPrivate = webhook.allowPrivate;
    } else {
      const workflow = await this.#store.getWorkflow(d.listenerId);
      if (!workflow) return deleted("workflow");
      if (!workflow.url) {
        return {
          kind: "succeeded",
          attempted: false,
          note: "the workflow has no url: the event was recorded, not sent",
        };
      }
      url = workflow.url;
      sealed = workflow.signingSecretSealed;
    }
    return {
      key: this.#keys.getOrSet(url, () => {
        try {
          return `http:${new URL(url).host.toLowerCase()}`;
        } catch {
          return `http:${url}`;
        }
      }),
      send: ({ timeoutMs, stop }) =>
        this.#sender.send(
          {
            url,
            secret: this.#opened.getOrSet(sealed, () => this.#secrets.open(sealed)),
            id: d.id,
            emitterId: d.emitterId,
            eventId: d.eventId,
            channel: d.channel,
            body: JSON.stringify(d.event ?? null),
            allowPrivate,
            attempt: d.attempts + 1,
            trace: d.trace,
          },
          timeoutMs,
          stop,
        ),
    };
  }
}

/** Listener sources: the event becomes the argument of their `run`, one delivery at a time per subscription. */
export class SourceDeliverer implements Deliverer {
  readonly #store: Storage;
  readonly #runner: SourceRunner;

  constructor(store: Storage, runner: SourceRunner) {
    this.#store = store;
    this.#runner = runner;
  }

  async prepare(d: Delivery): Promise<PreparedDelivery | AttemptOutcome> {
    const source = await this.#store.getSource(d.listenerId);
    if (!source) return deleted("source");
    if (!source.active) return { kind: "release" };
    if (d.hops > maxSourceHops) {
      return {
        kind: "failed",
        code: "loop_detected",
        attempted: false,
        error: `refused: the event already went through ${d.hops - 1} sources by subscription (at most ${maxSourceHops}); check the subscriptions for a loop`,
      };
    }
    return {
      key: `source:${source.id}`,
      send: async ({ nowMs }) => {
        let hold: QuotaHold;
        try {
          hold = await this.#runner.checkQuota(source);
        } catch (err) {
          const e = err as Partial<AppError>;
          if (e.code === "quota_exceeded") {
            return {
              kind: "retry",
              error: String(e.message),
              retryAfterMs: parseRetryAfter(e.headers?.["retry-after"], nowMs),
            };
          }
          throw err;
        }
        // With traces on, the attempt's span is the run's parent (attempt-span.ts).
        const span = tracing.on ? startSourceAttempt(d) : undefined;
        let attempt: AttemptOutcome = { kind: "retry", error: "the run threw" };
        try {
          // What the listener emits is routed one hop further than this delivery.
          const outcome = await deliveryContext.run({ hops: d.hops }, () =>
            this.#runner.invoke(
              source,
              { kind: "run", event: d.event },
              { trigger: "subscription", hold, trace: span?.spanContext() },
            ),
          );
          const e = outcome.error;
          attempt = outcome.ok
            ? { kind: "succeeded" }
            : { kind: "retry", error: e ? `${e.code}: ${e.message}` : "the run failed" };
          return attempt;
        } finally {
          if (span) endAttempt(span, attempt);
        }
      },
    };
  }
}

export type Deliverers = Record<ListenerKind, Deliverer>;
