/** A source's stored events: `event_summaries` (with truncation and cursors) and range deletion. */
import type { FastifyInstance } from "fastify";
import { Type } from "typebox";
import { channelPattern, normalizeChannel } from "../../domain/channels.ts";
import { type EventIdParts, parseEventId } from "../../domain/event-ids.ts";
import { AppError } from "../../errors.ts";
import { commonParams, errorResponses } from "../conventions.ts";
import { eventEntrySchema, renderEvent } from "../event-entries.ts";
import { sourceIdParams, visibleSource } from "./sources.ts";

export const eventListQuery = Type.Object(
  {
    ...commonParams,
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 10 })),
    after: Type.Optional(Type.String({ maxLength: 40, description: "Event ID: items older than it" })),
    before: Type.Optional(Type.String({ maxLength: 40, description: "Event ID: items newer than it" })),
    expand: Type.Optional(Type.Literal("event", { description: "event: full event data, never truncated" })),
    event_name: Type.Optional(
      Type.String({ maxLength: 64, pattern: channelPattern.replace("(|", "(|default|") }),
    ),
  },
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

/** Lists one emitter's events for an `eventListQuery`. */
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
  const page = await app.fount.store.listEvents(emitterId, {
    channel: channelOverride ?? normalizeChannel(q.event_name),
    limit: q.limit ?? 10,
    after: cursor(q.after, "after"),
    before: cursor(q.before, "before"),
  });
  const first = page.items[0];
  const last = page.items[page.items.length - 1];
  return {
    page_info: {
      total_count: page.totalCount,
      count: page.items.length,
      start_cursor: first?.id ?? null,
      end_cursor: last?.id ?? null,
    },
    data: page.items.map((e) => renderEvent(e, q.expand === "event")),
  };
}

export async function sourceEventRoutes(app: FastifyInstance): Promise<void> {
  const tags = ["events"];

  app.get(
    "/sources/:id/event_summaries",
    {
      schema: {
        tags,
        summary: "The source's last events (up to 100 per channel), newest first",
        description:
          "event_name picks the channel ($logs, $errors or a custom name; default channel otherwise). Data over 1 KB is truncated unless expand=event.",
        params: sourceIdParams,
        querystring: eventListQuery,
        response: eventListResponse,
      },
    },
    async (request) => {
      const { id } = request.params as { id: string };
      const source = await visibleSource(app, request, id);
      return listEventsFor(
        app,
        source.id,
        request.query as Record<string, string | undefined> & { limit?: number },
      );
    },
  );

  app.delete(
    "/sources/:id/events",
    {
      schema: {
        tags,
        summary: "Delete stored events: all, or an inclusive ID range",
        description:
          "start_id alone deletes it and everything later; end_id alone it and everything earlier. Answers 202; a following read never shows a deleted event.",
        params: sourceIdParams,
        querystring: Type.Object(
          {
            ...commonParams,
            start_id: Type.Optional(Type.String({ maxLength: 40 })),
            end_id: Type.Optional(Type.String({ maxLength: 40 })),
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
      const q = request.query as { start_id?: string; end_id?: string };
      const from = cursor(q.start_id, "start_id");
      const to = cursor(q.end_id, "end_id");
      const source = await visibleSource(app, request, id);
      // Deleted before answering, so no later read can show a deleted event.
      const deleted = await app.fount.store.deleteEvents(source.id, from, to);
      return reply.code(202).send({ data: { deleted } });
    },
  );
}
