/**
 * Settling: what an attempt's outcome makes of its delivery. Succeeded; pending again at the time the
 * retry schedule (or the receiver's Retry-After) names; or failed for good, with the entry for the
 * emitter's `$errors` stream. An attempt that was made also gets its attempt row. The ledger records
 * the settlement in one transaction.
 */
import type { Delivery, DeliveryAttempt } from "../domain/types.ts";
import type { DeliveryPatch } from "../storage/port.ts";
import { attemptDetailOf, storableText } from "./attempt-record.ts";
import type { AttemptOutcome, FailureCode } from "./outcome.ts";
import { maxAttempts, retryDelay } from "./schedule.ts";

/** A delivery's next state after an attempt, with what goes with it. */
export interface Settlement {
  patch: DeliveryPatch;
  attempt?: DeliveryAttempt;
  /** Turn the webhook listener inactive. */
  deactivate?: boolean;
  /** Record the failure on the emitter's `$errors` stream. */
  failure?: { code: FailureCode; message: string };
}

/** When and how long the attempt took, and what the retry jitter draws from ([0, 1)). */
export interface AttemptTiming {
  startedMs: number;
  durationMs: number;
  nowMs: number;
  random: () => number;
}

/** Turns an outcome (other than a release) into the delivery's next state. */
export function settlementOf(
  d: Delivery,
  outcome: Exclude<AttemptOutcome, { kind: "release" }>,
  { startedMs, durationMs, nowMs: now, random }: AttemptTiming,
): Settlement {
  const attempted = outcome.kind === "retry" || outcome.attempted !== false;
  const attempts = d.attempts + (attempted ? 1 : 0);
  const round = d.roundAttempts + (attempted ? 1 : 0);
  const statusCode = outcome.statusCode ?? null;
  const s: Settlement = {
    patch: {
      status: "succeeded",
      attempts,
      roundAttempts: round,
      nextAttemptMs: null,
      lastStatusCode: attempted ? statusCode : d.lastStatusCode,
      lastError: null,
      lastDurationMs: attempted ? durationMs : d.lastDurationMs,
      updatedMs: now,
    },
  };
  let result: DeliveryAttempt["outcome"] = "succeeded";
  if (outcome.kind === "succeeded") {
    s.patch.lastError = outcome.note ?? null;
  } else if (outcome.kind === "retry") {
    const delay = round < maxAttempts ? (outcome.retryAfterMs ?? retryDelay(round, random)) : undefined;
    if (delay !== undefined) {
      result = "retry";
      s.patch.status = "pending";
      s.patch.nextAttemptMs = now + delay;
      s.patch.lastError = outcome.error;
    } else {
      result = "failed";
      s.patch.status = "failed";
      s.patch.lastError = `${outcome.error} (gave up after ${round} attempts)`;
      s.failure = { code: "delivery_failed", message: s.patch.lastError };
    }
  } else {
    result = "failed";
    s.patch.status = "failed";
    s.patch.lastError = outcome.error;
    s.deactivate = outcome.deactivate;
    if (outcome.report !== false) s.failure = { code: outcome.code, message: outcome.error };
  }
  // The error is often the listener's own text (what a source's run threw): on PostgreSQL, U+0000 in it
  // failed the write, and an unpaired surrogate every read of the first attempt (kept as JSON).
  if (s.patch.lastError !== null) s.patch.lastError = storableText(s.patch.lastError);
  if (s.failure) s.failure.message = storableText(s.failure.message);
  if (attempted) {
    s.attempt = {
      deliveryId: d.id,
      n: attempts,
      startedMs,
      durationMs,
      statusCode,
      error: s.patch.lastError,
      response: outcome.response ?? null,
      outcome: result,
      detail: attemptDetailOf(outcome, d.listenerKind),
    };
  }
  return s;
}
