/**
 * The arguments of the storage port's delivery operations (`claimDeliveries`, `settleDelivery`,
 * `searchDeliveries`, …): kept apart from port.ts, which re-exports them, so that the port's list of
 * operations stays one readable file.
 */
import type { DeliveryStatus } from "../domain/types.ts";

/** What an attempt (or a redelivery) changes on a delivery; the claim is always released. */
export interface DeliveryPatch {
  status: DeliveryStatus;
  attempts: number;
  roundAttempts: number;
  nextAttemptMs: number | null;
  lastStatusCode: number | null;
  lastError: string | null;
  lastDurationMs: number | null;
  updatedMs: number;
}

/** Which due deliveries a dispatcher may take now. */
export interface DeliveryClaim {
  nowMs: number;
  limit: number;
  /** At most this many of one listener (the per-destination limit). */
  perListener: number;
  /**
   * Marks the claimed rows with the claiming node (its `FOUNT_NODE_ID`), so that its next start can
   * release what a crashed run left, and so that claims of other nodes count against `perListener`.
   */
  claimToken: string;
  /**
   * The claim's lease: until then no other claimer takes the rows; after it, any claimer may (their node
   * died). The claimer renews it while it works on them (`renewDeliveryClaims`). Default: `nowMs` plus
   * `defaultClaimLeaseMs`.
   */
  leaseUntilMs?: number;
  /** Listeners whose destination is busy: their deliveries stay for a later claim. */
  exceptListeners: string[];
  /** Listeners whose destination has some deliveries in flight: how many more each may take now. */
  room?: Record<string, number>;
  /**
   * Look at no more than this many due rows, in due order, busy listeners' rows included: a claim then
   * costs the same whatever the backlog of a busy destination. Unset, the claim looks past every row
   * of the busy listeners (the dispatcher does that now and then so that others are not stuck behind).
   */
  scanLimit?: number;
  /**
   * Several nodes: this process's member name in the cluster (`ClusterStore`). Deliveries to a source
   * whose run lease another live node holds (its heartbeat at most `deadAfterMs` old) are left to that
   * node, which runs the source: taken here, each would move the lease.
   */
  member?: { nodeId: string; deadAfterMs: number };
}

/** Which deliveries `searchDeliveries` lists: a listener's or an event's, narrowed by the other fields. */
export interface DeliverySearch {
  /** The deliveries to this listener… */
  listenerId?: string;
  /** …or those of this event (at least one of the two is given). */
  event?: { emitterId: string; eventId: string };
  /** Only deliveries whose subscription (or replay) one of these owns: the caller's tenants. */
  ownerIds?: string[];
  /** Only deliveries whose listener one of these owns (or which is gone): tenants that may see its URL. */
  listenerOwnerIds?: string[];
  status?: DeliveryStatus;
  /** Created at or after this time (epoch ms). */
  sinceMs?: number;
  /** Created before this time (epoch ms). */
  untilMs?: number;
  /** The last attempt's HTTP status is in this inclusive range. */
  statusCode?: { min: number; max: number };
}

/** How long a claim holds when the claimer names no lease (see `DeliveryClaim.leaseUntilMs`). */
export const defaultClaimLeaseMs = 60_000;
