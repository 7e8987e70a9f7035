/**
 * The event search's own routes (docs/streams.md, "Searching events"): the search across every source of
 * the caller (`/users/me/event_summaries`) or of one of its organizations (`/orgs/{org_id}/…`), and a
 * source's matching events exported as NDJSON, streamed a page at a time. The search within one source is
 * on the source's event lists (source-events.ts).
 */
import { Readable } from "node:stream";
import type { FastifyInstance } from "fastify";
import { Type } from "typebox";
import { channelPattern } from "../../domain/events/channels.ts";
import { keptPageBytes } from "../../domain/events/retention.ts";
import type { EventKey, EventSearch } from "../../storage/event-search.ts";
import type { Storage } from "../../storage/port.ts";
import { actingOwner, commonParams, errorResponses, principal } from "../conventions.ts";
import { renderEvent } from "../event-entries.ts";
import { type SearchPageQuery, searchOf, searchPage, withinWindow } from "../event-search-pages.ts";
import { searchParams } from "../event-search-params.ts";
import { takeSearchTurn } from "../search-turns.ts";
import { eventListQuery, eventListResponse } from "./source-events.ts";
import { sourceIdParams, visibleSource } from "./sources.ts";

/**
 * Events read from the store per page of an export, at most; the store cuts each page at `keptPageBytes`
 * of event JSON by the events' sizes, read before the events, as it does for an SSE resume and a
 * backfill (`keptPages`). Events may be 1 MiB each, and a page is in memory whole while it is written:
 * 500 of them a page, a few exports whose readers stopped reading took the server past its heap and
 * down; a page sized from the page before held 50 events on its first page, and 500 when small events
 * gave way to large ones.
 */
const exportPage = 500;
/** Lines are handed to the response in chunks of about this many characters, one chunk buffered. */
const exportChunkChars = 1024 * 1024;

/** A stored channel (`$in`, the queue of pending deliveries, has no stored events to search). */
const storedChannel = Type.Optional(
  Type.String({ maxLength: 64, pattern: channelPattern.replace("(|", "(|default|"), description: "Channel" }),
);

/** The cross-source lists' query: the event lists' (without `$in`), and the search. */
const crossSourceQuery = Type.Object(
  {
    ...eventListQuery.properties,
    after: Type.Optional(
      Type.String({ maxLength: 120, description: "Cursor (end_cursor): items older than it" }),
    ),
    before: Type.Optional(
      Type.String({ maxLength: 120, description: "Cursor (start_cursor): items newer than it" }),
    ),
    event_name: storedChannel,
    ...searchParams,
  },
  { additionalProperties: false },
);

/** Every event of a search, newest first, as NDJSON lines of event summaries (untruncated). */
async function* ndjsonLines(store: Storage, search: EventSearch): AsyncGenerator<string> {
  let after: EventKey | undefined;
  for (;;) {
    const page = await store.searchEvents(search, { limit: exportPage, maxBytes: keptPageBytes, after });
    let chunk = "";
    for (const e of page.items) {
      chunk += `${JSON.stringify(renderEvent(e, true))}\n`;
      if (chunk.length >= exportChunkChars) {
        yield chunk;
        chunk = "";
      }
    }
    if (chunk) yield chunk;
    const last = page.items.at(-1);
    // A page cut by its bytes is short with more behind it, so only an empty page ends the export.
    if (!last) return;
    after = { ms: last.idMs, seq: last.idSeq, emitterId: last.emitterId };
  }
}

export async function eventSearchRoutes(app: FastifyInstance): Promise<void> {
  const { store, retention } = app.fount;
  const tags = ["events"];
  const description =
    "Newest first across the sources; each entry's metadata.emitter_id names its source. q, where, since, until, event_name and delivery_status as on a source's event_summaries (docs/streams.md, \"Searching events\"); cursors are <event ID>:<source ID>.";

  app.get(
    "/users/me/event_summaries",
    {
      schema: {
        tags,
        summary: "Search the events of every source the caller owns",
        description,
        querystring: crossSourceQuery,
        response: eventListResponse,
      },
    },
    async (request) =>
      searchPage(
        store,
        request,
        { sourceOwnerIds: [principal(request).user.id] },
        request.query as SearchPageQuery,
      ),
  );

  app.get(
    "/orgs/:org_id/event_summaries",
    {
      schema: {
        tags,
        summary: "Search the events of every source an organization owns (members only)",
        description,
        params: Type.Object({ org_id: Type.String({ pattern: "^o_[A-Za-z0-9]+$", maxLength: 64 }) }),
        querystring: crossSourceQuery,
        response: eventListResponse,
      },
    },
    async (request) => {
      const { org_id } = request.params as { org_id: string };
      // A non-member gets 404, as for an organization that does not exist.
      const owner = actingOwner(request, org_id);
      return searchPage(store, request, { sourceOwnerIds: [owner] }, request.query as SearchPageQuery);
    },
  );

  app.get(
    "/sources/:id/events/export",
    {
      schema: {
        tags,
        summary: "Export a source's matching events as NDJSON, streamed",
        description:
          "application/x-ndjson: one event summary a line (never truncated), newest first, every matching event of the channel. The filters of event_summaries (q, where, since, until, delivery_status, event_name).",
        params: sourceIdParams,
        querystring: Type.Object(
          {
            ...commonParams,
            event_name: storedChannel,
            ...searchParams,
          },
          { additionalProperties: false },
        ),
        response: {
          200: {
            description: "The events, one JSON event summary a line",
            content: { "application/x-ndjson": { schema: { type: "string" } } },
          },
          ...errorResponses(404),
        },
      },
    },
    async (request, reply) => {
      const { id } = request.params as { id: string };
      const source = await visibleSource(app, request, id);
      // Every parameter is read before the first byte, so that a bad one is still a 400.
      const search = await withinWindow(
        store,
        retention,
        searchOf(request, { emitterId: source.id }, request.query as SearchPageQuery),
      );
      // The whole export is one of the account's searches, until its response ends or is cut.
      reply.raw.once("close", await takeSearchTurn(request));
      reply.type("application/x-ndjson; charset=utf-8");
      // One chunk waits for a reader that stopped reading, not sixteen: the generator reads no further.
      return reply.send(Readable.from(ndjsonLines(store, search), { highWaterMark: 1 }));
    },
  );
}
