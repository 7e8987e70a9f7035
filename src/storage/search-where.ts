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
  /** The next parameter's placeholder, holding `value` (in the order written: SQLite's `?` take them so). */
  const p = (value: string | number) => {
    params.push(value);
    return placeholder(params.length);
  };
  const add = (clause: (p: string) => string, value: string | number) => where.push(clause(p(value)));
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
  const list = (values: string[]) => values.map(p).join(", ");
  if (s.ownerIds) where.push(s.ownerIds.length === 0 ? "FALSE" : `owner_id IN (${list(s.ownerIds)})`);
  if (s.listenerOwnerIds) {
    const [first] = s.listenerOwnerIds;
    // A listener gone since counts as the caller's: its deliveries stay theirs to look back on.
    where.push(
      first === undefined
        ? "FALSE"
        : `coalesce(${ownerOf("listener_id")}, ${p(first)}) IN (${list(s.listenerOwnerIds)})`,
    );
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
