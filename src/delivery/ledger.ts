/**
 * Records what became of a delivery attempt, in one transaction: the delivery's new state, the attempt,
 * a webhook turned inactive (410), and for a delivery that failed for good an entry on the emitter's
 * `$errors` stream (never for a delivery of an `$errors` event: a failing error route must not feed itself).
 */
import type { Bus } from "../domain/bus.ts";
import type { Committer } from "../domain/events/committer.ts";
import type { EventRecorder } from "../domain/events/recorder.ts";
import type { Delivery, EventRecord } from "../domain/types.ts";
import { randomString } from "../ids.ts";
import { deliveryContext } from "./routing.ts";
import type { Settlement } from "./settlement.ts";

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

export class DeliveryLedger {
  readonly #d: LedgerDeps;

  constructor(deps: LedgerDeps) {
    this.#d = deps;
  }

  async settle(delivery: Delivery, s: Settlement): Promise<void> {
    const { committer, recorder, bus } = this.#d;
    const nowMs = s.patch.updatedMs;
    let stored: EventRecord | undefined;
    const report = s.failure && delivery.channel !== "$errors";
    const usual = !report && !s.deactivate;
    // The `$errors` entry is routed one hop further than the delivery that failed, so error routes
    // between sources stay within the loop guard too.
    const exists = await deliveryContext.run({ hops: delivery.hops }, () =>
      (usual ? (this.#d.settlements ?? committer) : committer).submit(async (tx) => {
        stored = undefined;
        if (usual) {
          // The usual settlement writes only: the driver may hold it back with the rest of the group
          // commit instead of waiting for the update's answer. A delivery deleted meanwhile stays
          // deleted and its attempt is not stored, but `delivery.settled` is still published: the
          // attempt was made.
          await tx.settleDelivery(delivery.id, s.patch, s.attempt);
          return true;
        }
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
        }
        return true;
      }),
    );
    if (stored) bus.emit("event.stored", stored);
    if (!exists) return;
    bus.emit("delivery.settled", {
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
      latencyMs: Math.max(0, nowMs - delivery.indexedAtMs),
    });
  }

  /** The `$errors` entry: the spec's error-event shape, with the delivery's details in the context. */
  #errorEvent(d: Delivery, s: Settlement, nowMs: number): unknown {
    return {
      original_event: d.event ?? null,
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
