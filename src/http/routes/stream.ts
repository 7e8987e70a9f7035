/**
 * The live stream, `GET /sources/{id}/sse` at the root (no `/v1`): Server-Sent Events of one channel of
 * a source, each `id: <event id>` and `data: <event_summaries entry, untruncated>`. A Last-Event-ID
 * (header, or `last_event_id` in the query) first replays the stored events after it.
 */
import type { OutgoingHttpHeaders } from "node:http";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { Type } from "typebox";
import { channelPattern, normalizeChannel } from "../../domain/events/channels.ts";
import { type EventIdParts, parseEventId } from "../../domain/events/event-ids.ts";
import { keptPages } from "../../domain/events/retention.ts";
import { StreamHub, type StreamHubOptions } from "../../domain/events/stream-hub.ts";
import type { EventRecord, SourceRecord } from "../../domain/types.ts";
import { invalidParameter } from "../../errors.ts";
import type { Services } from "../../services.ts";
import { errorResponses, principal } from "../conventions.ts";
import { renderEvent } from "../event-entries.ts";
import type { Authenticator } from "../plugins/authentication.ts";
import { sseSink } from "../sse-sink.ts";
import { StreamUsers, type UserStream } from "../stream-users.ts";
import { sourceIdParams, visibleSource } from "./sources.ts";

/** The hub of each app, for tests and benchmarks (the plugin is encapsulated, so it decorates nothing). */
const hubs = new WeakMap<Services, StreamHub>();
/** Each app's record of its users' streams, for tests. */
const usersOf = new WeakMap<Services, StreamUsers>();

/** The stream hub of an app, by its services (`built.services`); undefined before the plugin loads. */
export function streamHubOf(services: Services): StreamHub | undefined {
  return hubs.get(services);
}

/** The per-user record of an app's streams, by its services; undefined before the plugin loads. */
export function streamUsersOf(services: Services): StreamUsers | undefined {
  return usersOf.get(services);
}

/** An event as its SSE frame: no `event:` line, so clients get it as a plain `message`. */
export function sseFrame(e: EventRecord): string {
  // JSON.stringify escapes line breaks inside strings, so the entry is always one `data:` line.
  return `id: ${e.id}\ndata: ${JSON.stringify(renderEvent(e, true))}\n\n`;
}

const sseHeaders = {
  "content-type": "text/event-stream",
  "cache-control": "no-cache",
  // Tells nginx-style proxies not to buffer the stream.
  "x-accel-buffering": "no",
};

function lastEventId(
  header: string | string[] | undefined,
  query: string | undefined,
): EventIdParts | undefined {
  // The header is what a reconnecting client sends, newer than any ID left in its URL.
  const fromHeader = Array.isArray(header) ? header[header.length - 1] : header;
  const [field, value] = fromHeader ? ["Last-Event-ID", fromHeader] : ["last_event_id", query];
  if (value === undefined || value === "") return undefined;
  const parsed = parseEventId(value.trim());
  if (!parsed) throw invalidParameter(field, `${field} must be an event ID like 1606511826306-0`);
  return parsed;
}

export async function streamRoutes(
  app: FastifyInstance,
  options: { authenticator: Authenticator; hub?: Partial<StreamHubOptions> },
): Promise<void> {
  const { store, bus, streamInterest } = app.fount;
  const hub = new StreamHub(bus, sseFrame, options.hub);
  const users = new StreamUsers(() => ({
    maxStreams: hub.options.maxStreamsPerUser,
    maxReplays: hub.options.maxReplaysPerUser,
    replayWaitMs: app.fount.config.sseReplayWaitMs,
    recheckMs: hub.options.recheckMs,
  }));
  // A revocation on this node, or on another one (cluster-link.ts carries it), is checked at once.
  const offRevoked = bus.on("access.revoked", ({ userId }) => users.checkNow(userId));
  app.addHook("onClose", async () => offRevoked());
  usersOf.set(app.fount, users);
  hubs.set(app.fount, hub);
  // Before the server waits for its connections to end: open streams would hold it forever.
  app.addHook("preClose", async () => {
    hub.close();
    users.close();
  });

  app.get(
    "/sources/:id/sse",
    {
      schema: {
        tags: ["events"],
        summary: "Live stream of a source's new events (Server-Sent Events)",
        description:
          "text/event-stream: each event is `id: <event id>` and `data: <the event_summaries entry, untruncated>`. " +
          "Last-Event-ID (header or last_event_id) replays stored events after that ID before going live; " +
          "a `:keepalive` comment comes every 15 s.",
        params: sourceIdParams,
        querystring: Type.Object(
          {
            event_name: Type.Optional(
              Type.String({ maxLength: 64, pattern: channelPattern.replace("(|", "(|default|") }),
            ),
            last_event_id: Type.Optional(Type.String({ maxLength: 40 })),
            org_id: Type.Optional(Type.String({ pattern: "^o_[A-Za-z0-9]+$", maxLength: 64 })),
          },
          { additionalProperties: false },
        ),
        response: {
          200: {
            description: "The event stream",
            content: { "text/event-stream": { schema: { type: "string" } } },
          },
          ...errorResponses(404),
        },
      },
    },
    async (request, reply) => {
      const { id } = request.params as { id: string };
      const q = request.query as { event_name?: string; last_event_id?: string };
      await stream(request, reply, id, [normalizeChannel(q.event_name)]);
    },
  );

  // Pipedream's stream URLs: a source's emits, and its observations (its logs and errors in one stream).
  const pipedreamShapes = [
    ["emits", "Live stream of a source's emits (Pipedream's URL shape)", [""]],
    [
      "observations",
      "Live stream of a source's logs and errors together (Pipedream's URL shape)",
      ["$logs", "$errors"],
    ],
  ] as const;
  for (const [kind, summary, channels] of pipedreamShapes) {
    app.get(
      `/sse/dc/:id/${kind}`,
      {
        schema: {
          tags: ["events"],
          summary,
          description:
            "The same frames as /sources/{id}/sse. emits is the default channel (event_name picks another); observations carries $logs and $errors. Last-Event-ID replays stored events after it.",
          params: sourceIdParams,
          querystring: Type.Object(
            {
              ...(kind === "emits"
                ? {
                    event_name: Type.Optional(
                      Type.String({ maxLength: 64, pattern: channelPattern.replace("(|", "(|default|") }),
                    ),
                  }
                : {}),
              last_event_id: Type.Optional(Type.String({ maxLength: 40 })),
              org_id: Type.Optional(Type.String({ pattern: "^o_[A-Za-z0-9]+$", maxLength: 64 })),
            },
            { additionalProperties: false },
          ),
          response: {
            200: {
              description: "The event stream",
              content: { "text/event-stream": { schema: { type: "string" } } },
            },
            ...errorResponses(404),
          },
        },
      },
      async (request, reply) => {
        const { id } = request.params as { id: string };
        const q = request.query as { event_name?: string };
        const chosen = kind === "emits" ? [normalizeChannel(q.event_name)] : [...channels];
        await stream(request, reply, id, chosen);
      },
    );
  }

  /**
   * A channel's kept events after `after` (Last-Event-ID), oldest first, a page at a time: everything its
   * retention keeps. The first page is read now, so that a store that fails answers this request with
   * its error; the rest as the stream sends them.
   */
  async function keptSince(
    source: SourceRecord,
    channel: string,
    after: { ms: number; seq: number },
  ): Promise<AsyncIterable<EventRecord[]>> {
    const pages = keptPages(
      store,
      source.id,
      channel,
      app.fount.retention.window(source.retention, channel),
      after,
    );
    const first = await pages.next();
    return (async function* () {
      if (first.done) return;
      yield first.value;
      yield* pages;
    })();
  }

  /** Streams `channels` of a source onto the reply; several channels share one socket (IDs are per source). */
  async function stream(
    request: FastifyRequest,
    reply: FastifyReply,
    id: string,
    channels: string[],
  ): Promise<void> {
    const q = request.query as { last_event_id?: string };
    const after = lastEventId(request.headers["last-event-id"], q.last_event_id);
    const source = await visibleSource(app, request, id);
    const mine = users.admit(principal(request).user.id, reply.raw);
    const turn = after ? await mine.replayTurn() : { release: () => {} };
    if (turn === "left" || mine.closed) {
      // The client left while it waited (or before): nothing to answer, nothing left behind.
      if (typeof turn === "object") turn.release();
      reply.hijack();
      return;
    }
    if (turn === "busy") return comeBackLater(reply);
    try {
      await openStream(request, reply, source, channels, after, mine);
    } finally {
      turn.release();
    }
  }

  /**
   * A resume that waited `FOUNT_SSE_REPLAY_WAIT_MS` for a replay turn: a 200 event stream holding only
   * `retry:` that ends at once, which an EventSource answers by reconnecting after that delay with the
   * same Last-Event-ID (a 429 or 503 would stop it for good). The delay is the one every stream sends,
   * so the client's later reconnections keep it. Nothing of the replay was read.
   */
  function comeBackLater(reply: FastifyReply): void {
    reply.hijack();
    reply.raw.writeHead(200, { ...(reply.getHeaders() as OutgoingHttpHeaders), ...sseHeaders });
    reply.raw.end(`: every replay turn of this user is taken; reconnect\nretry: ${hub.options.retryMs}\n\n`);
  }

  /** Opens the hub's clients of `channels` on the reply, replays what is stored after `after`, goes live. */
  async function openStream(
    request: FastifyRequest,
    reply: FastifyReply,
    source: SourceRecord,
    channels: string[],
    after: EventIdParts | undefined,
    mine: UserStream,
  ): Promise<void> {
    const id = source.id;
    // Subscribed before reading the store: an event committed meanwhile is either read or held (or
    // both, and then sent once), so the seam between replay and live has no gap. With several nodes,
    // the others send this emitter's events once they confirmed the stream (cluster-link.ts), before
    // the store is read and the headers go out.
    const interest = streamInterest?.watch(source.id);
    if (interest) reply.raw.once("close", interest.release);
    const sink = sseSink(reply.raw);
    const clients = channels.map((channel) => hub.open(source.id, channel, sink, after));
    const stored: Array<AsyncIterable<EventRecord[]> | EventRecord[]> = [];
    try {
      await interest?.ready;
      for (const channel of channels) {
        stored.push(after ? await keptSince(source, channel, after) : []);
      }
    } catch (err) {
      for (const client of clients) client.abandon();
      throw err;
    }
    // A stream's client never half-closes, so its FIN means it is gone: end the stream (the server keeps
    // half-closed sockets open for the other routes' answers, app.ts `httpAllowHalfOpen`).
    const socket = request.raw.socket;
    const gone = () => reply.raw.destroy();
    if (socket.readableEnded) gone();
    else {
      socket.once("end", gone);
      reply.raw.once("close", () => socket.off("end", gone));
    }
    reply.hijack();
    if (reply.raw.destroyed) {
      // The client left while the store was read.
      for (const client of clients) client.abandon();
      return;
    }
    // The stream lasts only as long as what let it open: a key revoked, a session ended or a membership
    // gone ends it within `recheckMs`, and at once after a revocation on any node (`access.revoked`).
    // Each check is the request's own authentication, run again.
    mine.watch(() => {
      void (async () => {
        request.principal = await options.authenticator.principal(request);
        await visibleSource(app, request, id);
      })().catch(() => {
        // Ended cleanly, as when the source is deleted: the client's reconnection then gets the 401 or 404.
        for (const client of clients) client.end();
      });
    });
    // Headers set by hooks (x-request-id) go out too: a hijacked reply does not send them itself.
    reply.raw.writeHead(200, { ...(reply.getHeaders() as OutgoingHttpHeaders), ...sseHeaders });
    request.log.debug({ sourceId: source.id, channels, replay: after !== undefined }, "stream opened");
    // One socket, one preamble: the first channel's client sends it.
    try {
      for (const [i, client] of clients.entries()) await client.start(stored[i] ?? [], i === 0);
    } catch (err) {
      // A later page of the replay could not be read: the client reconnects with the last ID it got.
      request.log.warn({ err, sourceId: source.id }, "stream replay failed");
      reply.raw.destroy();
    }
  }
}
