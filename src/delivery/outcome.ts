/** What one attempt at a delivery came to, as the deliverers report it to the dispatcher. */
import type { AttemptDetail } from "../domain/types.ts";

/** Stable codes of a delivery that failed for good (its `$errors` entry's `error.code`). */
export type FailureCode =
  | "delivery_failed"
  | "delivery_rejected"
  | "webhook_gone"
  | "destination_refused"
  | "loop_detected"
  | "listener_deleted";

/**
 * An attempt's result. `response` is the start of the answer's body and `detail` what an HTTP attempt
 * sent and got besides (attempt-record.ts); both are absent for other listeners.
 */
export type AttemptOutcome =
  /** Delivered; `attempted: false` when nothing had to be sent (a workflow without a URL). */
  | {
      kind: "succeeded";
      attempted?: boolean;
      statusCode?: number;
      response?: string;
      note?: string;
      detail?: AttemptDetail;
    }
  /** Worth trying again, per the schedule or after `retryAfterMs`. */
  | {
      kind: "retry";
      error: string;
      statusCode?: number;
      response?: string;
      retryAfterMs?: number;
      detail?: AttemptDetail;
    }
  /**
   * Failed for good. `attempted: false` when refused before sending; `report: false` keeps it off the
   * emitter's `$errors` stream; `deactivate` turns the webhook inactive (it answered 410 Gone).
   */
  | {
      kind: "failed";
      code: FailureCode;
      error: string;
      attempted?: boolean;
      report?: boolean;
      statusCode?: number;
      response?: string;
      deactivate?: boolean;
      detail?: AttemptDetail;
    }
  /** Not attempted (shutting down, or the listener turned inactive): the delivery stays as it was. */
  | { kind: "release" };
