/** A source's stored events: `event_summaries` (with truncation and cursors) and range deletion. */
import type { FastifyInstance } from "fastify";
import { Type } from "typebox";
import { channelPattern, normalizeChannel } from "../../domain/events/channels.ts";
import { type EventIdParts, parseEventId } from "../../domain/events/event-ids.ts";
import type { EventRecord } from "../../domain/types.ts";
import { AppError } from "../../errors.ts";
import { commonParams, errorResponses } from "../conventions.ts";
import { eventEntrySchema, renderEvent } from "../event-entries.ts";
import { asksSearch, type SearchPageQuery, searchPage } from "../event-search-pages.ts";
import { searchParams } from "../event-search-params.ts";
import { sourceIdParams, visibleSource } from "./sources.ts";

/** Queue of events waiting for delivery to a source: Pipedream's `$in` channel, read and cancelled here. */
export const inChannel = "$in";

/** `event_name` of the event routes: a channel, `default`, or `$in` (the pending deliveries to the source). */
const eventNameParam = Type.String({
  maxLength: 64,
  pattern: channelPattern.replace("(|", "(|default|\\$in|"),
  description:
    "Channel: empty or default, $errors, $logs, $in (events waiting for delivery to this source) or a custom name",
});

export const eventListQuery = Type.Object(
  {
    ...commonParams,
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 10 })),
    after: Type.Optional(Type.String({ maxLength: 40, description: "Event ID: items older than it" })),
    before: Type.Optional(Type.String({ maxLength: 40, description: "Event ID: items newer than it" })),
    expand: Type.Optional(Type.Literal("event", { description: "event: full event data, never truncated" })),
    event_name: Type.Optional(eventNameParam),
  },
  { additionalProperties: false },
);

/** A source's event lists: a channel's events, or those the search parameters find (docs/streams.md). */
export const sourceEventListQuery = Type.Object(
  { ...eventListQuery.properties, ...searchParams },
  { additionalProperties: false },
);

export const eventListResponse = {
  200: Type.Object({
    page_info: Type.Object({
      total_count: Type.Integer(),
      count: Type.Integer(),
      start_cursor: Type.Union([Type.String(), Type.Null()]),
      end_cursor: Type.Union([Type.String(), Type.Null()]),
    }),
    // Partial: include/exclude may drop any field of an entry.
    data: Type.Array(Type.Partial(eventEntrySchema)),
  }),
  ...errorResponses(404),
};

function cursor(value: string | undefined, field: string): EventIdParts | undefined {
  if (value === undefined) return undefined;
  const parsed = parseEventId(value);
  if (!parsed)
    throw new AppError("invalid_cursor", `${field} must be an event ID like 1606511826306-0`, {
      details: { field },
    });
  return parsed;
}

/** Lists one emitter's events for an `eventListQuery`; `end_cursor` is null when nothing older follows. */
export async function listEventsFor(
  app: FastifyInstance,
  emitterId: string,
  q: { limit?: number; after?: string; before?: string; expand?: string; event_name?: string },
  channelOverride?: string,
): Promise<Record<string, unknown>> {
  if (q.after !== undefined && q.before !== undefined) {
    throw new AppError("invalid_parameter", "Give either after or before, not both", {
      details: { field: "before" },
    });
  }
  const limit = q.limit ?? 10;
  const after = cursor(q.after, "after");
  const before = cursor(q.before, "before");
  if (channelOverride === undefined && q.event_name === inChannel) {
    const pending = await pendingFor(app, emitterId, { after, before });
    // Toward newer items the page is the nearest `limit` above the cursor, still newest first.
    if (before) pending.items = pending.items.slice(-limit);
    return renderEntries(pending, limit, before, q.expand);
  }
  // One event past the page tells whether anything older follows (toward newer items, the cursor's does).
  const { store, retention } = app.fount;
  const channel = channelOverride ?? normalizeChannel(q.event_name);
  const page = await store.listEvents(emitterId, {
    channel,
    limit: before ? limit : limit + 1,
    after,
    before,
    window: await retention.windowOf(store, emitterId, channel),
  });
  return renderEntries(page, limit, before, q.expand);
}

function renderEntries(
  page: { items: EventRecord[]; totalCount: number },
  limit: number,
  before: EventIdParts | undefined,
  expand: string | undefined,
): Record<string, unknown> {
  const items = page.items.slice(0, limit);
  const more = before ? items.length > 0 : page.items.length > limit;
  const first = items[0];
  const last = items[items.length - 1];
  return {
    page_info: {
      total_count: page.totalCount,
      count: items.length,
      start_cursor: first?.id ?? null,
      end_cursor: more ? (last?.id ?? null) : null,
    },
    data: items.map((e) => renderEvent(e, expand === "event")),
  };
}

/** Pending deliveries read at most: a source's `$in` queue is shown up to this many, newest first. */
const pendingShown = 1000;

interface PendingEvent extends EventRecord {
  deliveryId: string;
}

/** The deliveries waiting for a source listener, as events of its `$in` channel (newest event first). */
async function pendingFor(
  app: FastifyInstance,
  listenerId: string,
  range: { after?: EventIdParts; before?: EventIdParts; from?: EventIdParts; to?: EventIdParts },
): Promise<{ items: PendingEvent[]; totalCount: number }> {
  const page = await app.fount.store.listDeliveries(listenerId, { limit: pendingShown }, "pending");
  const all: PendingEvent[] = [];
  for (const d of page.items) {
    const id = parseEventId(d.eventId);
    if (!id) continue;
    all.push({
      deliveryId: d.id,
      emitterId: d.emitterId,
      channel: inChannel,
      id: d.eventId,
      idMs: id.ms,
      idSeq: id.seq,
      indexedAtMs: d.indexedAtMs,
      event: d.event,
      meta: { ...d.meta, delivery_id: d.id } as EventRecord["meta"],
    } as PendingEvent);
  }
  const cmp = (a: EventIdParts, b: EventIdParts) => a.ms - b.ms || a.seq - b.seq;
  const at = (e: PendingEvent) => ({ ms: e.idMs, seq: e.idSeq });
  all.sort((a, b) => cmp(at(b), at(a)) || (a.deliveryId < b.deliveryId ? 1 : -1));
  const { after, before, from, to } = range;
  let items = all.filter(
    (e) =>
      (!after || cmp(at(e), after) < 0) && (!from || cmp(at(e), from) >= 0) && (!to || cmp(at(e), to) <= 0),
  );
  // Toward newer items: the nearest ones above the cursor, still newest first.
  if (before) items = items.filter((e) => cmp(at(e), before) > 0);
  return { items, totalCount: all.length };
}

export async function sourceEventRoutes(app: FastifyInstance): Promise<void> {
  const tags = ["events"];

  for (const [url, summary] of [
    ["/sources/:id/event_summaries", "The source's last events (up to 100 per channel), newest first"],
    ["/sources/:id/events", "The source's last events, as event_summaries (Pipedream's clients call both)"],
  ] as const) {
    app.get(
      url,
      {
        schema: {
          tags,
          summary,
          description:
            'event_name picks the channel ($logs, $errors, $in or a custom name; default channel otherwise). Data over 1 KB is truncated unless expand=event. page_info.end_cursor is null on the last page. q, where, since, until and delivery_status search the channel (docs/streams.md, "Searching events"); total_count then counts the matching events.',
          params: sourceIdParams,
          querystring: sourceEventListQuery,
          response: eventListResponse,
        },
      },
      async (request) => {
        const { id } = request.params as { id: string };
        const source = await visibleSource(app, request, id);
        const query = request.query as SearchPageQuery;
        if (asksSearch(query)) return searchPage(app.fount.store, request, { emitterId: source.id }, query);
        return listEventsFor(app, source.id, query);
      },
    );
  }

  app.delete(
    "/sources/:id/events",
    {
      schema: {
        tags,
        summary: "Delete stored events: all, or an inclusive ID range, of every channel or one",
        description:
          "start_id alone deletes it and everything later; end_id alone it and everything earlier. event_name limits the deletion to one channel; on $in it cancels events waiting for delivery to this source. Answers 202 once the events are deleted, so a following read never shows one; a large range is deleted in batches at the pruner's pace (FOUNT_RETENTION_PRUNE_RATE, 100,000 a second by default), so that other sources' ingest never waits for it.",
        params: sourceIdParams,
        querystring: Type.Object(
          {
            ...commonParams,
            start_id: Type.Optional(Type.String({ maxLength: 40 })),
            end_id: Type.Optional(Type.String({ maxLength: 40 })),
            event_name: Type.Optional(eventNameParam),
          },
          { additionalProperties: false },
        ),
        response: {
          202: Type.Object({ data: Type.Object({ deleted: Type.Integer() }) }),
          ...errorResponses(404),
        },
      },
    },
    async (request, reply) => {
      const { id } = request.params as { id: string };
      const q = request.query as { start_id?: string; end_id?: string; event_name?: string };
      const from = cursor(q.start_id, "start_id");
      const to = cursor(q.end_id, "end_id");
      const channel =
        q.event_name === undefined || q.event_name === inChannel ? undefined : normalizeChannel(q.event_name);
      const source = await visibleSource(app, request, id);
      if (q.event_name === inChannel) {
        // Cancelled before answering, so a cancelled event is never delivered after the 202.
        const pending = await pendingFor(app, source.id, { from, to });
        const deleted = await app.fount.store.cancelDeliveries(
          source.id,
          pending.items.map((e) => e.deliveryId),
        );
        return reply.code(202).send({ data: { deleted } });
      }
      // Deleted before answering, so no later read can show a deleted event; in the pruner's paced
      // batches, so that a large range never holds other sources' ingest (pruner.ts, `deleteRange`).
      const deleted = await app.fount.pruner.deleteRange(source.id, { from, to, channel });
      return reply.code(202).send({ data: { deleted } });
    },
  );
}
