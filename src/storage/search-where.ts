/**
 * The WHERE clause of a deliveries search (`DeliverySearch`), shared by both drivers: they differ only
 * in how a parameter is written (`$n` or `?`), which `placeholder` gives for the n-th (from 1).
 */
import { deliveryStatuses } from "../domain/types.ts";
import type { DeliverySearch } from "./port.ts";
import { ownerOf } from "./rows.ts";

export function searchWhere(
  s: DeliverySearch,
  placeholder: (n: number) => string,
  /**
   * The listener as a range of one (`listener_id >= p AND listener_id <= p`), for a page ordered by the
   * listener, then seq: PostgreSQL then walks a listener's index, where told `listener_id = p` it may walk
   * the primary key, taking the listener's rows for spread evenly among all (postgres/delivery-history.ts).
   */
  listenerRange = false,
): { where: string; params: Array<string | number> } {
  const params: Array<string | number> = [];
  const where: string[] = [];
  const add = (clause: (p: string) => string, value: string | number) => {
    params.push(value);
    where.push(clause(placeholder(params.length)));
  };
  if (s.listenerId === undefined && s.event === undefined)
    throw new Error("a deliveries search names a listener or an event");
  // The listener's index (or the event's) leads; the rest filters the rows it finds.
  if (s.listenerId !== undefined)
    add(
      (p) => (listenerRange ? `listener_id >= ${p} AND listener_id <= ${p}` : `listener_id = ${p}`),
      s.listenerId,
    );
  if (s.event) {
    add((p) => `emitter_id = ${p}`, s.event.emitterId);
    add((p) => `event_id = ${p}`, s.event.eventId);
  }
  if (s.ownerIds) {
    if (s.ownerIds.length === 0) where.push("FALSE");
    else {
      const first = params.length + 1;
      params.push(...s.ownerIds);
      where.push(`owner_id IN (${s.ownerIds.map((_, i) => placeholder(first + i)).join(", ")})`);
    }
  }
  if (s.listenerOwnerIds) {
    if (s.listenerOwnerIds.length === 0) where.push("FALSE");
    else {
      // A listener gone since counts as the caller's: its deliveries stay theirs to look back on. The
      // parameters in the order they are written (SQLite's `?` take them so).
      const owners = [s.listenerOwnerIds[0]!, ...s.listenerOwnerIds].map((id) => {
        params.push(id);
        return placeholder(params.length);
      });
      where.push(`coalesce(${ownerOf("listener_id")}, ${owners[0]}) IN (${owners.slice(1).join(", ")})`);
    }
  }
  // Written out, not a parameter: `status = 'failed'` lets both engines use the failed index (SQLite
  // migration 024, PostgreSQL 025), which a parameter's unknown value does not.
  if (s.status !== undefined) {
    if (!deliveryStatuses.includes(s.status)) throw new Error(`not a delivery status: ${s.status}`);
    where.push(`status = '${s.status}'`);
  }
  if (s.sinceMs !== undefined) add((p) => `created_ms >= ${p}`, s.sinceMs);
  if (s.untilMs !== undefined) add((p) => `created_ms < ${p}`, s.untilMs);
  if (s.statusCode) {
    add((p) => `last_status_code >= ${p}`, s.statusCode.min);
    add((p) => `last_status_code <= ${p}`, s.statusCode.max);
  }
  return { where: where.join(" AND "), params };
}
