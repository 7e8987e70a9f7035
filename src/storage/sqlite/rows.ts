/** Row shapes shared by the SQLite operation classes. */
import type { SQLInputValue } from "node:sqlite";
import type { Subscription } from "../../domain/types.ts";

export type Row = Record<string, SQLInputValue>;

export const toSubscription = (r: Row): Subscription => ({
  id: r.id as string,
  ownerId: r.owner_id as string,
  emitterId: r.emitter_id as string,
  listenerId: r.listener_id as string,
  eventName: r.event_name as string,
  createdAt: r.created_at as number,
});
