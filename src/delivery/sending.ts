/**
 * Takes one claimed delivery to its result: the deliverer of its listener kind prepares it (reads the
 * listener, names the destination), it waits for a slot of its destination (and reads the listener again
 * if it waited long), the attempt is made under the timeout, and its outcome is settled: recorded by the
 * ledger, or the delivery given back untouched. The dispatcher hands each claimed delivery to `start`,
 * which keeps it in flight until then and wakes the loop when its end may have made work for a claim.
 */
import type { FastifyBaseLogger } from "fastify";
import type { Clock } from "../clock.ts";
import type { Delivery } from "../domain/types.ts";
import { isStoreUnavailable } from "../storage/health.ts";
import type { DeliveryClaims } from "./claims.ts";
import type { Deliverers, PreparedDelivery } from "./deliverers.ts";
import type { DeliveryLedger } from "./ledger.ts";
import type { DispatcherOptions } from "./options.ts";
import type { AttemptOutcome } from "./outcome.ts";
import type { SendSlots } from "./send-slots.ts";
import { type AttemptTiming, type Settlement, settlementOf } from "./settlement.ts";
import type { HeldWithdrawals } from "./withdrawals.ts";

export interface SendingDeps {
  deliverers: Deliverers;
  claims: DeliveryClaims;
  slots: SendSlots;
  ledger: DeliveryLedger;
  clock: Clock;
  /** The dispatcher's options, read when used (tests change them). */
  options: DispatcherOptions;
  /** The current run's stop signal: it aborts the attempts in flight. */
  stop: () => AbortSignal;
  /** Deliveries being handled, by ID: added by `start`, removed when done (the dispatcher waits on them). */
  inflight: Map<string, Promise<void>>;
  /** Asks the dispatcher's loop to claim soon. */
  wake: () => void;
  /** Parks, in batches beside the loop, the due deliveries of a listener just made inactive (a 410). */
  parkSoon: (listenerId: string) => void;
  /** Held deliveries whose route was taken away meanwhile (withdrawals.ts). */
  withdrawals: HeldWithdrawals;
  /** Whether delivery `id` is still pending in the store (asked only of one a withdrawal marked `row`). */
  stillPending: (id: string) => Promise<boolean>;
  logger?: FastifyBaseLogger;
}

/** A delivery that waited longer than this for a slot reads its listener again before sending. */
const staleAfterWaitMs = 1_000;

export class DeliverySending {
  readonly #d: SendingDeps;
  #finished = 0;

  constructor(deps: SendingDeps) {
    this.#d = deps;
  }

  /** Deliveries handled to the end (settled, released or left claimed), for the dispatcher's `drain`. */
  get finished(): number {
    return this.#finished;
  }

  /** Handles a claimed delivery in the background; when it is done, wakes the loop if a claim may find work. */
  start(d: Delivery): void {
    const { claims, inflight, withdrawals, logger } = this.#d;
    withdrawals.track(d);
    let done = false;
    const task = this.#handle(d)
      .then(
        (finished) => {
          done = finished;
        },
        (err) => {
          if (!isStoreUnavailable(err)) {
            logger?.error({ err, deliveryId: d.id }, "delivery handling failed");
            return;
          }
          claims.leftClaimed(d.id);
          logger?.debug({ err, deliveryId: d.id }, "delivery left claimed: the store is unavailable");
        },
      )
      .finally(() => {
        claims.prepared(d.id);
        claims.finished(d.id);
        withdrawals.forget(d.id);
        inflight.delete(d.id);
        this.#finished++;
        // Its slot is free: claim again when something may be waiting for it (the last claim took some,
        // or left this listener out and a batch's room is free now; `starvedFor`), when it made the next
        // delivery of a source's subscription claimable, or when it is pending again. Not after every
        // webhook delivery: with deliveries claimed at routing, that was a claim per delivery that found
        // nothing, and while a backlog drained a claim per delivery that took one.
        if (!done || d.listenerKind === "source" || claims.starvedFor(d.listenerId)) this.#d.wake();
      });
    inflight.set(d.id, task);
  }

  /** Attempts `d`; resolves true when it is settled for good (succeeded or failed). */
  async #handle(d: Delivery): Promise<boolean> {
    const { claims, slots, clock, withdrawals } = this.#d;
    let prepared = await this.#prepare(d);
    // Counted from here in its destination's held deliveries.
    claims.prepared(d.id);
    // Its subscription was deleted meanwhile: its row went with it (or goes with the sweep).
    if (withdrawals.verdict(d.id) === "drop") return true;
    if (!("key" in prepared)) {
      if (prepared.kind === "release") claims.foundInactive(d.listenerId);
      return this.#finish(d, prepared, clock.now(), 0);
    }
    let { key } = prepared;
    claims.hold(d.listenerId, key);
    try {
      const waitedFrom = slots.canSend(key, d.ownerId) ? undefined : performance.now();
      if (!(await slots.acquire(key, d.ownerId))) {
        // Stopping: the delivery stays pending for the next run.
        await claims.release([d.id]);
        return false;
      }
      let verdict = withdrawals.verdict(d.id);
      if (verdict === "row") {
        // A route of its owner was deleted while it was held: its row may be gone with it.
        verdict = (await this.#d.stillPending(d.id)) ? withdrawals.verdict(d.id) : "drop";
        if (verdict === "row") withdrawals.cleared(d.id);
      }
      if (verdict === "drop") {
        slots.release(key, d.ownerId);
        return true;
      }
      const stale = waitedFrom !== undefined && performance.now() - waitedFrom > staleAfterWaitMs;
      if (stale || verdict === "listener") {
        // It waited long for its host, or its listener was deleted meanwhile: the listener may have
        // changed (deleted, deactivated, new URL).
        if (verdict === "listener") withdrawals.cleared(d.id);
        const again = await this.#prepare(d);
        if (!("key" in again) || again.key !== key) {
          slots.release(key, d.ownerId);
          if (!("key" in again)) return this.#finish(d, again, clock.now(), 0);
          claims.unhold(key);
          key = again.key;
          claims.hold(d.listenerId, key);
          if (!(await slots.acquire(key, d.ownerId))) {
            await claims.release([d.id]);
            return false;
          }
        }
        prepared = again;
      }
      // Withdrawn while it read its row or listener, or waited again for a slot.
      if (withdrawals.verdict(d.id) === "drop") {
        slots.release(key, d.ownerId);
        return true;
      }
      const started = clock.now();
      const startedAt = performance.now();
      let outcome: AttemptOutcome;
      try {
        outcome = await prepared.send({
          timeoutMs: this.#d.options.timeoutMs,
          stop: this.#d.stop(),
          nowMs: started,
        });
      } catch (err) {
        // A listener source's run whose commit found the store lost: nothing was stored, no attempt counts.
        outcome = isStoreUnavailable(err)
          ? { kind: "release" }
          : { kind: "retry", error: (err as Error).message || String(err) };
      } finally {
        slots.release(key, d.ownerId);
      }
      return await this.#finish(d, outcome, started, Math.round(performance.now() - startedAt));
    } finally {
      claims.unhold(key);
    }
  }

  async #prepare(d: Delivery): Promise<PreparedDelivery | AttemptOutcome> {
    try {
      return await this.#d.deliverers[d.listenerKind].prepare(d);
    } catch (err) {
      // The store is out of reach, not the destination: no attempt is counted, the delivery waits.
      if (isStoreUnavailable(err)) return { kind: "release" };
      return { kind: "retry", error: `could not prepare the delivery: ${(err as Error).message}` };
    }
  }

  /** Records the outcome as the delivery's next state, or gives a released delivery back untouched. */
  async #finish(
    d: Delivery,
    outcome: AttemptOutcome,
    startedMs: number,
    durationMs: number,
  ): Promise<boolean> {
    if (outcome.kind === "release") {
      await this.#d.claims.release([d.id]);
      return false;
    }
    const timing = { startedMs, durationMs, random: this.#d.options.random };
    let s = settlementOf(d, outcome, { ...timing, nowMs: this.#d.clock.now() });
    try {
      await this.#d.ledger.settle(d, s);
    } catch (err) {
      // A lost store: the delivery stays claimed and is released once the store answers (`start`).
      if (isStoreUnavailable(err)) throw err;
      s = this.#unrecorded(d, err, { ...timing, nowMs: this.#d.clock.now() });
      await this.#d.ledger.settle(d, s);
    }
    if (s.deactivate && d.listenerKind === "webhook") this.#d.parkSoon(d.listenerId);
    return s.patch.status !== "pending";
  }

  /**
   * The store refused to record an attempt's result while it was reachable (a value it cannot hold, a
   * bug): the attempt counts as failed and the delivery is tried again on the retry schedule, without an
   * attempt row, and fails for good once the schedule is spent. Left claimed instead, it was claimed
   * again once its lease ran out, forever; released, at once.
   */
  #unrecorded(d: Delivery, err: unknown, timing: AttemptTiming): Settlement {
    const reason = (err as Error | undefined)?.message || String(err);
    this.#d.logger?.error(
      { err, deliveryId: d.id },
      "the store refused a delivery's result; the delivery is retried on the schedule",
    );
    const s = settlementOf(
      d,
      { kind: "retry", error: `the attempt's result could not be recorded (${reason})` },
      timing,
    );
    delete s.attempt;
    return s;
  }
}
