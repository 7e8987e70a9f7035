/**
 * Replay (docs/delivery.md, "Replay"): send a kept event again, or every kept event of a source that
 * matches, to a listener the caller chooses, as new deliveries marked as a replay. The bulk form can
 * count first (`dry_run`), so that a client confirms before it sends.
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { Type } from "typebox";
import { countInRange, maxReplayedEvents, replayEvents, replayInRange } from "../../delivery/replay.ts";
import { channelPattern } from "../../domain/events/channels.ts";
import { storedBytesPayer } from "../../domain/sources/quota-hold.ts";
import { AppError, invalidParameter, notFound } from "../../errors.ts";
import { actingOwner, canSee, commonParams, errorResponses, params, principal } from "../conventions.ts";
import { keptEvent, searchOf, withinWindow } from "../event-search-pages.ts";
import { type SearchInput, searchParams } from "../event-search-params.ts";
import { inSearchTurn } from "../search-turns.ts";
import { sourceEventParams } from "./delivery-history.ts";
import { sourceIdParams, visibleSource } from "./sources.ts";

const listenerId = Type.String({
  pattern: "^(dc|p|wh)_[A-Za-z0-9]+$",
  maxLength: 64,
  description: "The webhook, source or workflow to send to",
});

const replayAnswer = Type.Object({
  data: Type.Object({
    replayed: Type.Integer({ description: "Deliveries queued" }),
    matching: Type.Integer({ description: "Events that matched" }),
    replay_id: Type.Union([Type.String(), Type.Null()], {
      description: "rpl_…, marking the deliveries; null when nothing was queued",
    }),
    delivery_id: Type.Optional(Type.String({ description: "The delivery of a single event's replay" })),
  }),
});

interface BulkReplay extends SearchInput {
  listener_id: string;
  org_id?: string;
  event_name?: string;
  dry_run?: boolean;
}

export async function replayRoutes(app: FastifyInstance): Promise<void> {
  const { store, clock, dispatcher, retention } = app.fount;
  const tags = ["events"];

  /** The listener if the caller may see it; unknown and foreign look the same. */
  async function visibleListener(request: FastifyRequest, id: string): Promise<string> {
    if (!canSee(request, await store.resourceOwner(id))) throw notFound("Listener", id);
    return id;
  }

  app.post(
    "/sources/:id/events/:event_id/replay",
    {
      schema: {
        tags,
        summary: "Send a kept event again to a listener, as a new delivery marked as a replay",
        description:
          "The listener is a webhook, source or workflow the caller may see, subscribed or not. The delivery is due now and belongs to the caller (or org_id).",
        params: sourceEventParams,
        body: Type.Object({ ...commonParams, listener_id: listenerId }, { additionalProperties: false }),
        response: { 200: replayAnswer, ...errorResponses(404) },
      },
    },
    async (request) => {
      const { id, event_id } = request.params as { id: string; event_id: string };
      const p = params<{ listener_id: string; org_id?: string }>(request);
      const ownerId = actingOwner(request, p.org_id);
      const source = await visibleSource(app, request, id);
      const listener = await visibleListener(request, p.listener_id);
      const event = await keptEvent(store, retention, source.id, event_id);
      const payer = await storedBytesPayer(app.fount, principal(request).user.id);
      const { replayId, deliveries } = await replayEvents(store, {
        ownerId,
        listenerId: listener,
        events: [event],
        nowMs: clock.now(),
        payer,
      });
      dispatcher.wake();
      return { data: { replayed: 1, matching: 1, replay_id: replayId, delivery_id: deliveries[0]!.id } };
    },
  );

  app.post(
    "/sources/:id/events/replay",
    {
      schema: {
        tags,
        summary: "Send every kept event of a source that matches again to a listener",
        description: `Events of one channel (event_name, default the default channel) that the event search finds (q, where, since, until, delivery_status: docs/streams.md, "Searching events"), sent oldest first, at most ${maxReplayedEvents} per request (more is a 400: narrow the search). dry_run counts them without sending, for a confirmation.`,
        params: sourceIdParams,
        body: Type.Object(
          {
            ...commonParams,
            listener_id: listenerId,
            event_name: Type.Optional(
              Type.String({ maxLength: 64, pattern: channelPattern.replace("(|", "(|default|") }),
            ),
            ...searchParams,
            dry_run: Type.Optional(Type.Boolean({ description: "Only count the matching events" })),
          },
          { additionalProperties: false },
        ),
        response: { 200: replayAnswer, ...errorResponses(404) },
      },
    },
    async (request) => {
      const { id } = request.params as { id: string };
      const p = params<BulkReplay>(request);
      const ownerId = actingOwner(request, p.org_id);
      const source = await visibleSource(app, request, id);
      // The event search's own reading of q, where, since, until and delivery_status.
      const search = await withinWindow(store, retention, searchOf(request, { emitterId: source.id }, p));
      const listener = await visibleListener(request, p.listener_id);
      // Counted first, then read and written a page at a time (replayInRange), all in one search turn.
      const answer = await inSearchTurn(request, async () => {
        const { matching, newest } = await countInRange(store, search);
        if (matching > maxReplayedEvents)
          throw invalidParameter(
            "since",
            `More than ${maxReplayedEvents} events match; replay at most ${maxReplayedEvents} at once (narrow the search, since or until)`,
          );
        if (p.dry_run || !newest) return { replayed: 0, matching, replay_id: null };
        const userId = principal(request).user.id;
        const payer = await storedBytesPayer(app.fount, userId);
        const sent = await replayInRange(store, search, newest, {
          ownerId,
          listenerId: listener,
          nowMs: clock.now(),
          payer,
          beforePage: async (replayed) => {
            if (payer === undefined) return;
            try {
              await storedBytesPayer(app.fount, userId);
            } catch (err) {
              if (!(err instanceof AppError)) throw err;
              // What was queued stays queued: the answer says how far the replay got.
              throw new AppError(
                "quota_exceeded",
                `The daily stored-bytes quota of this account ran out after ${replayed} of the ${matching} matching events were queued for replay; the rest were not`,
                { details: { replayed, matching }, headers: err.headers },
              );
            }
          },
        });
        const replay_id = sent.matching > 0 ? sent.replayId : null;
        return { replayed: sent.replayed, matching: sent.matching, replay_id };
      });
      if (answer.replayed > 0) dispatcher.wake();
      return { data: answer };
    },
  );
}
