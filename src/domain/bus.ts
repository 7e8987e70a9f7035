/** Typed internal events: the SSE streams, routing and tests listen here instead of reaching into services. */
import { EventEmitter } from "node:events";
import type { DeliveryStatus, EventRecord, ListenerKind } from "./types.ts";

export interface EventMap {
  /** An event (emit, log or error) was committed to the store. */
  "event.stored": [event: EventRecord];
  /** A source's invocation finished (committed or failed). */
  "invocation.finished": [
    info: { sourceId: string; trigger: string; ok: boolean; errorCode?: string; durationMs: number },
  ];
  /** An event committed by another node on the same database (cluster-link.ts): for live streams only. */
  "event.replicated": [event: EventRecord];
  /** A source was deleted (`remote`: through another node): its live streams end. */
  "source.deleted": [info: { sourceId: string; remote?: boolean }];
  /**
   * A credential or membership was taken away: an API key revoked, a session ended, a member removed from
   * an organization (`userId`: whose; undefined: anyone's). The SSE streams it opened check their access
   * at once rather than at their next periodic check, on every node (`remote`: made through another).
   */
  "access.revoked": [info: { userId?: string; remote?: boolean }];
  /**
   * Routes were taken away with what they had not delivered: subscriptions deleted, listeners deleted,
   * routes between two owners deleted (a member removed). The dispatcher sends none of the deliveries it
   * holds of them from then on (delivery/withdrawals.ts), on every node (`remote`: made through another).
   */
  "deliveries.withdrawn": [
    info: { subscriptionIds?: string[]; listenerIds?: string[]; ownerIds?: string[]; remote?: boolean },
  ];
  /** A timer fired (or was skipped) for a source. */
  "timer.fired": [info: { sourceId: string; propName: string; scheduledMs: number; skipped?: string }];
  /** A delivery's attempt (or a decision without one) was recorded; `status` is its state afterwards. */
  "delivery.settled": [
    info: {
      deliveryId: string;
      subscriptionId: string;
      emitterId: string;
      eventId: string;
      listenerId: string;
      kind: ListenerKind;
      status: DeliveryStatus;
      outcome: "succeeded" | "retry" | "failed";
      statusCode: number | null;
      error: string | null;
      /** How long the attempt took (null without one). */
      durationMs: number | null;
      /** From the event's commit to this settlement. */
      latencyMs: number;
    },
  ];
  /**
   * A delivery destination (a listener) started failing, recovered, or was forgotten after a day without
   * attempts, as this node's attempts find it (delivery/destination-health.ts); `failing`: how many
   * destinations fail now.
   */
  "destination.changed": [
    info: {
      listenerId: string;
      kind: ListenerKind;
      state: "failing" | "recovered" | "forgotten";
      failing: number;
    },
  ];
}

export class Bus {
  readonly #emitter = new EventEmitter({ captureRejections: false });

  constructor() {
    // Every SSE client listens; the default warning at 10 listeners would be noise.
    this.#emitter.setMaxListeners(0);
  }

  on<K extends keyof EventMap>(name: K, listener: (...args: EventMap[K]) => void): () => void {
    this.#emitter.on(name, listener as (...args: unknown[]) => void);
    return () => this.#emitter.off(name, listener as (...args: unknown[]) => void);
  }

  /** Listener errors are reported, never thrown into the emitter's caller. */
  emit<K extends keyof EventMap>(name: K, ...args: EventMap[K]): void {
    for (const listener of this.#emitter.listeners(name)) {
      try {
        (listener as (...a: EventMap[K]) => void)(...args);
      } catch (err) {
        this.#emitter.emit("error", err);
      }
    }
  }

  onError(handler: (err: unknown) => void): void {
    this.#emitter.on("error", handler);
  }
}
