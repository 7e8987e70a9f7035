/**
 * Records what became of a delivery attempt, in one transaction: the delivery's new state, the attempt,
 * a webhook turned inactive (410), and for a delivery that failed for good an entry on the emitter's
 * `$errors` stream (never for a delivery of an `$errors` event: a failing error route must not feed itself).
 */
import type { Bus } from "../domain/bus.ts";
import type { Committer } from "../domain/events/committer.ts";
import type { EventRecorder } from "../domain/events/recorder.ts";
import { chargeStored, creatorOf } from "../domain/sources/stored-bytes.ts";
import type { Delivery, EventRecord } from "../domain/types.ts";
import { randomString } from "../ids.ts";
import { jsonLength } from "../runtime/child/guards/json-size.ts";
import { isStoreUnavailable } from "../storage/health.ts";
import { deliveryContext } from "./routing.ts";
import type { Settlement } from "./settlement.ts";

/** The largest event a delivery's `$errors` entry copies as its `original_event` (characters of JSON). */
export const maxOriginalEventChars = 64 * 1024;

export interface LedgerDeps {
  committer: Committer;
  /**
   * Commits the usual settlements (a result and its attempt, nothing else) when the store runs
   * transactions side by side (PostgreSQL): they then commit beside the emits instead of between them.
   * Default: `committer`.
   */
  settlements?: Committer;
  recorder: EventRecorder;
  bus: Bus;
}

/** A usual settlement waiting for its batch's commit. */
interface Usual {
  delivery: Delivery;
  s: Settlement;
  done: () => void;
  failed: (err: unknown) => void;
}

export class DeliveryLedger {
  readonly #d: LedgerDeps;
  /**
   * Usual settlements not yet taken by a committer job. The first one submits a job; every settlement
   * that arrives before the job runs joins it, so that a group commit holds one job for all of them
   * instead of one per delivery (each with its promise, its async context and its closures).
   */
  #usual: Usual[] = [];

  constructor(deps: LedgerDeps) {
    this.#d = deps;
  }

  async settle(delivery: Delivery, s: Settlement): Promise<void> {
    const report = s.failure && delivery.channel !== "$errors";
    if (!report && !s.deactivate) {
      // The usual settlement writes only: the driver may hold it back with the rest of the group commit
      // instead of waiting for the update's answer. A delivery deleted meanwhile stays deleted and its
      // attempt is not stored, but `delivery.settled` is still published: the attempt was made.
      const { promise, resolve, reject } = Promise.withResolvers<void>();
      if (this.#usual.length === 0) this.#submitUsual();
      this.#usual.push({ delivery, s, done: resolve, failed: reject });
      return promise;
    }
    const { committer, recorder, bus } = this.#d;
    const nowMs = s.patch.updatedMs;
    let stored: EventRecord | undefined;
    // The `$errors` entry is routed one hop further than the delivery that failed, so error routes
    // between sources stay within the loop guard too.
    const exists = await deliveryContext.run({ hops: delivery.hops }, () =>
      committer.submit(async (tx) => {
        stored = undefined;
        if (!(await tx.updateDelivery(delivery.id, s.patch))) return false;
        if (s.attempt) await tx.insertDeliveryAttempt(s.attempt);
        if (s.deactivate && delivery.listenerKind === "webhook") {
          await tx.updateWebhook(delivery.listenerId, { active: false, updatedAt: Math.floor(nowMs / 1000) });
        }
        // An emitter deleted since is left alone: its streams are gone with it.
        if (report && (await tx.resourceOwner(delivery.emitterId)) !== undefined) {
          stored = await recorder.store(tx, {
            emitterId: delivery.emitterId,
            channel: "$errors",
            event: this.#errorEvent(delivery, s, nowMs),
            nowMs,
          });
          // The entry and its routed copies count in the emitter's creator's stored bytes, as its events do.
          const creator = await creatorOf(tx, delivery.emitterId);
          if (creator !== undefined) await chargeStored(tx, creator, stored, nowMs);
        }
        return true;
      }),
    );
    if (stored) bus.emit("event.stored", stored);
    if (exists) this.#published(delivery, s);
  }

  /**
   * Submits the job that writes the usual settlements waiting when it runs (a failed group commit runs
   * it again alone, with the same ones). Once it committed, each is published and its `settle` resolves.
   */
  #submitUsual(): void {
    let batch: Usual[] | undefined;
    const job = (this.#d.settlements ?? this.#d.committer).submit(async (tx) => {
      if (!batch) {
        batch = this.#usual;
        this.#usual = [];
      }
      for (const u of batch) await tx.settleDelivery(u.delivery.id, u.s.patch, u.s.attempt);
    });
    job.then(
      () => {
        for (const u of batch!) this.#publishUsual(u);
      },
      (err: unknown) => {
        // Refused by a reachable store: one settlement it cannot write (a value it refuses) must not fail
        // the others, so each is written again in a job of its own (a failed group commit retries its
        // jobs one by one).
        if (batch && batch.length > 1 && !isStoreUnavailable(err)) {
          for (const u of batch) {
            (this.#d.settlements ?? this.#d.committer)
              .submit((tx) => tx.settleDelivery(u.delivery.id, u.s.patch, u.s.attempt))
              .then(() => this.#publishUsual(u), u.failed);
          }
          return;
        }
        // Not run at all (the store was out of reach before the transaction began): those waiting fail too.
        if (!batch) {
          batch = this.#usual;
          this.#usual = [];
        }
        for (const u of batch) u.failed(err);
      },
    );
  }

  /** A usual settlement committed: published, and its `settle` resolves. */
  #publishUsual(u: Usual): void {
    // One failing publication fails its own settlement only, as it did with a job of its own.
    try {
      this.#published(u.delivery, u.s);
      u.done();
    } catch (err) {
      u.failed(err);
    }
  }

  /** `delivery.settled` for the bus: metrics, destination health, the error log. */
  #published(delivery: Delivery, s: Settlement): void {
    this.#d.bus.emit("delivery.settled", {
      deliveryId: delivery.id,
      subscriptionId: delivery.subscriptionId,
      emitterId: delivery.emitterId,
      eventId: delivery.eventId,
      listenerId: delivery.listenerId,
      kind: delivery.listenerKind,
      status: s.patch.status,
      outcome: s.attempt?.outcome ?? (s.patch.status === "pending" ? "retry" : s.patch.status),
      statusCode: s.patch.lastStatusCode,
      error: s.patch.lastError,
      durationMs: s.attempt ? s.patch.lastDurationMs : null,
      latencyMs: Math.max(0, s.patch.updatedMs - delivery.indexedAtMs),
    });
  }

  /**
   * The `$errors` entry: the spec's error-event shape, with the delivery's details in the context. An
   * event over `maxOriginalEventChars` is named, not copied: it is kept on its emitter under
   * `original_context.event_id`, and each failing listener's entry copied it again, routed on to every
   * listener of `$errors` (25 failing webhooks and 25 on `$errors` made 625 copies of each event).
   */
  #errorEvent(d: Delivery, s: Settlement, nowMs: number): unknown {
    const chars = jsonLength(d.event ?? null);
    return {
      original_event:
        chars > maxOriginalEventChars
          ? {
              $omitted: `The event, at least ${chars} bytes of JSON, is kept on its emitter under original_context.event_id`,
              bytes_at_least: chars,
            }
          : (d.event ?? null),
      original_context: {
        id: randomString(27),
        ts: new Date(d.indexedAtMs).toISOString(),
        emitter_id: d.emitterId,
        event_id: d.eventId,
        event_name: d.channel,
        delivery_id: d.id,
        subscription_id: d.subscriptionId,
        listener_id: d.listenerId,
        source_type: "delivery",
        owner_id: d.ownerId,
      },
      error: {
        code: s.failure!.code,
        message: s.failure!.message,
        cellId: null,
        ts: new Date(nowMs).toISOString(),
        stack: null,
        status_code: s.patch.lastStatusCode,
        attempts: s.patch.attempts,
      },
    };
  }
}
