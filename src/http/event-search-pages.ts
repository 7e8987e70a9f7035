/**
 * Pages of the event search (docs/streams.md, "Searching events"), rendered as `event_summaries`: for one
 * source (cursors are event IDs, as in the unfiltered lists) and across an account's sources (cursors
 * are `<event ID>:<source ID>`, since two sources' events may share an ID).
 */
import type { FastifyRequest } from "fastify";
import { normalizeChannel } from "../domain/events/channels.ts";
import { formatEventId, parseEventId } from "../domain/events/event-ids.ts";
import type { Retention } from "../domain/events/retention.ts";
import type { EventRecord } from "../domain/types.ts";
import { AppError, invalidParameter, notFound } from "../errors.ts";
import type { EventKey, EventSearch } from "../storage/event-search.ts";
import type { Storage } from "../storage/port.ts";
import { visibleOwners } from "./conventions.ts";
import { renderEvent } from "./event-entries.ts";
import { parseSearch, type SearchInput } from "./event-search-params.ts";
import { inSearchTurn } from "./search-turns.ts";

/** The query of a search page. */
export interface SearchPageQuery extends SearchInput {
  limit?: number;
  after?: string;
  before?: string;
  expand?: string;
  event_name?: string;
}

/** Whether a list request asks for a search (any of its parameters), rather than a channel's plain list. */
export function asksSearch(p: SearchInput): boolean {
  return (
    p.q !== undefined ||
    p.where !== undefined ||
    p.since !== undefined ||
    p.until !== undefined ||
    p.delivery_status !== undefined
  );
}

/** Which events a search page looks at: one source's, or those of every source of some accounts. */
export type SearchScope = { emitterId: string } | { sourceOwnerIds: string[] };

/** The search a request asks for, in `scope`, on its channel (`$in` has no stored events to search). */
export function searchOf(request: FastifyRequest, scope: SearchScope, p: SearchPageQuery): EventSearch {
  if (p.event_name === "$in")
    throw invalidParameter("event_name", "The $in queue cannot be searched: search a stored channel");
  return { ...scope, channel: normalizeChannel(p.event_name), ...parseSearch(p, visibleOwners(request)) };
}

/**
 * A one-source search kept to what the source keeps: its channel's window (newest `keep`, none older than
 * its age), as listings read it. Events past it stay in the store until the pruner reaches them (seconds,
 * up to a minute for an age); an export or a replay must not send them. Searches of pages do not take
 * it: the cut is a walk of `keep` index entries on PostgreSQL, each search.
 */
export async function withinWindow(
  store: Storage,
  retention: Retention,
  search: EventSearch,
): Promise<EventSearch> {
  if (search.emitterId === undefined) return search;
  const window = await retention.windowOf(store, search.emitterId, search.channel);
  const cut = await store.eventWindowCut(search.emitterId, search.channel, window.keep);
  const sinceMs =
    window.sinceMs === undefined
      ? search.sinceMs
      : Math.max(search.sinceMs ?? window.sinceMs, window.sinceMs);
  return { ...search, ...(sinceMs !== undefined ? { sinceMs } : {}), ...(cut ? { newerThan: cut } : {}) };
}

/**
 * One stored event of a source that its channel's window keeps (`withinWindow`), or 404: one past it is
 * no longer kept, though the pruner may not have deleted it yet.
 */
export async function keptEvent(
  store: Storage,
  retention: Retention,
  sourceId: string,
  eventId: string,
): Promise<EventRecord> {
  const event = await store.getEvent(sourceId, eventId);
  if (!event) throw notFound("Event", eventId);
  const { sinceMs, newerThan: cut } = await withinWindow(store, retention, {
    emitterId: sourceId,
    channel: event.channel,
  });
  const kept =
    (sinceMs === undefined || event.idMs >= sinceMs) &&
    (!cut || event.idMs > cut.ms || (event.idMs === cut.ms && event.idSeq > cut.seq));
  if (!kept) throw notFound("Event", eventId);
  return event;
}

/** The cursor of an event in a scope's order. */
function cursorOf(scope: SearchScope, e: { id: string; emitterId: string }): string {
  return "emitterId" in scope ? e.id : `${e.id}:${e.emitterId}`;
}

function parseCursor(scope: SearchScope, value: string | undefined, field: string): EventKey | undefined {
  if (value === undefined) return undefined;
  const [id = "", emitter] = "emitterId" in scope ? [value, scope.emitterId] : value.split(":");
  const parts = parseEventId(id);
  if (!parts || emitter === undefined || emitter === "" || formatEventId(parts) !== id)
    throw new AppError(
      "invalid_cursor",
      "emitterId" in scope
        ? `${field} must be an event ID like 1606511826306-0`
        : `${field} must be a cursor like 1606511826306-0:dc_abc, as end_cursor gives`,
      { details: { field } },
    );
  return { ...parts, emitterId: emitter };
}

/** A page of a search as `event_summaries`: newest first, `end_cursor` null on the last page. */
export async function searchPage(
  store: Storage,
  request: FastifyRequest,
  scope: SearchScope,
  p: SearchPageQuery,
): Promise<Record<string, unknown>> {
  if (p.after !== undefined && p.before !== undefined)
    throw invalidParameter("before", "Give either after or before, not both");
  const search = searchOf(request, scope, p);
  const limit = p.limit ?? 10;
  const after = parseCursor(scope, p.after, "after");
  const before = parseCursor(scope, p.before, "before");
  // One event past the page tells whether anything older follows (toward newer items, the cursor's does).
  const page = await inSearchTurn(request, () =>
    store.searchEvents(search, { limit: before ? limit : limit + 1, after, before, count: true }),
  );
  const items = page.items.slice(0, limit);
  const more = before ? items.length > 0 : page.items.length > limit;
  const first = items[0];
  const last = items.at(-1);
  return {
    page_info: {
      total_count: page.totalCount,
      count: items.length,
      start_cursor: first ? cursorOf(scope, first) : null,
      end_cursor: more && last ? cursorOf(scope, last) : null,
    },
    data: items.map((e) => renderEvent(e, p.expand === "event")),
  };
}
