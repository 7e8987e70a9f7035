/**
 * What the console reads of delivery history (docs/delivery.md, "Attempts" and "Replay"): a delivery
 * with its attempts, an event's deliveries, and the replay call with its confirmation state.
 */
import { useState } from "preact/hooks";
import { api } from "./api.ts";

/** An attempt as GET /v1/deliveries/{id} renders it. */
export interface Attempt {
  n: number;
  at_ms: number;
  duration_ms: number;
  request: { url: string | null; headers: Record<string, string> | null; body: string };
  response: {
    status: number;
    headers: Record<string, string | string[]> | null;
    body: string | null;
    truncated: boolean;
  } | null;
  error: string | null;
  error_kind: string | null;
  outcome: "succeeded" | "retry" | "failed";
  replay: boolean;
}

/** A delivery as the lists render it. */
export interface DeliverySummary {
  id: string;
  event_id: string;
  emitter_id: string;
  listener_id: string;
  status: "pending" | "succeeded" | "failed";
  attempts: number;
  last_status_code: number | null;
  last_error: string | null;
  created_at: number;
  replay: { id: string; replayed_from: string | null } | null;
}

/** A delivery with every attempt, as GET /v1/deliveries/{id} renders it. */
export interface DeliveryDetail extends Omit<DeliverySummary, "attempts"> {
  event_name: string;
  listener_kind: "webhook" | "source" | "workflow";
  attempt_count: number;
  next_attempt_at: number | null;
  attempts: Attempt[];
}

/** Where the console shows a listener. */
export function listenerHref(id: string): string | undefined {
  if (id.startsWith("wh_")) return `#/webhooks/${id}`;
  if (id.startsWith("dc_")) return `#/sources/${id}`;
  return undefined;
}

/** Where the console shows a delivery. */
export const deliveryHref = (id: string) => `#/deliveries/${id}`;

/** Where the console shows an event of a source, with its deliveries. */
export const eventHref = (sourceId: string, eventId: string) => `#/sources/${sourceId}/events/${eventId}`;

/**
 * A replay asked for, then confirmed: `ask` shows the confirmation, `confirm` sends it and reports the
 * new delivery's ID, `cancel` drops it.
 */
export function useReplay(sourceId: string, eventId: string, onDone: (deliveryId: string) => void) {
  const [asking, setAsking] = useState<string | undefined>();
  const [error, setError] = useState<unknown>();
  const [busy, setBusy] = useState(false);
  async function confirm() {
    if (!asking) return;
    setBusy(true);
    setError(undefined);
    try {
      const r = await api<{ data: { delivery_id: string } }>(
        "POST",
        `/v1/sources/${sourceId}/events/${eventId}/replay`,
        { listener_id: asking },
      );
      setAsking(undefined);
      onDone(r.data.delivery_id);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  }
  return { asking, ask: setAsking, cancel: () => setAsking(undefined), confirm, error, busy };
}
