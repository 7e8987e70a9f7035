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
import { AppError, invalidParameter } from "../../errors.ts";
import type { Services } from "../../services.ts";
import { errorResponses, principal } from "../conventions.ts";
import { renderEvent } from "../event-entries.ts";
import type { Authenticator } from "../plugins/authentication.ts";
import { sseSink } from "../sse-sink.ts";
import { sourceIdParams, visibleSource } from "./sources.ts";

/** The hub of each app, for tests and benchmarks (the plugin is encapsulated, so it decorates nothing). */
const hubs = new WeakMap<Services, StreamHub>();

/** The stream hub of an app, by its services (`built.services`); undefined before the plugin loads. */
export function streamHubOf(services: Services): StreamHub | undefined {
  return hubs.get(services);
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
  /** Open streams by user, on this node. */
  const openBy = new Map<string, number>();
  /** Replays running by user, on this node, and the streams waiting for one to end (first come first served). */
  const replaysBy = new Map<string, { running: number; waiting: Array<() => void> }>();
  /** Each open stream's access check, by the user whose request opened it. */
  const checksBy = new Map<string, Set<() => void>>();
  /**
   * Users (`*`: everyone) whose streams were checked within the last second, and those asked again
   * meanwhile: a user ending sessions in a loop makes one check of their streams a second, not one each.
   */
  const checkedLately = new Map<string, NodeJS.Timeout>();
  const askedAgain = new Set<string>();
  const checkStreamsOf = (who: string) => {
    if (checkedLately.has(who)) {
      askedAgain.add(who);
      return;
    }
    const affected = who === "*" ? [...checksBy.values()] : [checksBy.get(who) ?? []];
    for (const checks of affected) for (const check of [...checks]) check();
    const quiet = setTimeout(() => {
      checkedLately.delete(who);
      if (askedAgain.delete(who)) checkStreamsOf(who);
    }, 1000);
    checkedLately.set(who, quiet.unref());
  };
  const offRevoked = bus.on("access.revoked", ({ userId }) => checkStreamsOf(userId ?? "*"));
  app.addHook("onClose", async () => {
    offRevoked();
    for (const quiet of checkedLately.values()) clearTimeout(quiet);
  });
  hubs.set(app.fount, hub);
  // Before the server waits for its connections to end: open streams would hold it forever.
  app.addHook("preClose", async () => hub.close());

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

  /**
   * Waits for one of the user's replay turns (`maxReplaysPerUser`); resolves with its release (once,
   * however often called), or with undefined when the client left while it waited. A waiting stream
   * holds no page and no live events: it opens on the hub once its turn comes. It waits rather than
   * answering 429, which an EventSource takes as final (it reconnects after network errors only).
   */
  async function replayTurn(userId: string, reply: FastifyReply): Promise<(() => void) | undefined> {
    let turns = replaysBy.get(userId);
    if (!turns) {
      turns = { running: 0, waiting: [] };
      replaysBy.set(userId, turns);
    }
    const user = turns;
    if (user.running < hub.options.maxReplaysPerUser) user.running++;
    else {
      if (reply.raw.destroyed) return undefined;
      const turn = await new Promise<boolean>((resolve) => {
        const take = () => {
          reply.raw.off("close", left);
          resolve(true);
        };
        const left = () => {
          user.waiting.splice(user.waiting.indexOf(take), 1);
          resolve(false);
        };
        user.waiting.push(take);
        reply.raw.once("close", left);
      });
      if (!turn) return undefined;
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      // The turn passes to the next waiting stream, or is given back.
      const next = user.waiting.shift();
      if (next) return next();
      user.running--;
      if (user.running === 0) replaysBy.delete(userId);
    };
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
    const userId = principal(request).user.id;
    const open = openBy.get(userId) ?? 0;
    if (open >= hub.options.maxStreamsPerUser)
      throw new AppError(
        "rate_limited",
        `At most ${hub.options.maxStreamsPerUser} streams may be open at once`,
        {
          headers: { "retry-after": "10" },
        },
      );
    openBy.set(userId, open + 1);
    reply.raw.once("close", () => {
      const n = (openBy.get(userId) ?? 1) - 1;
      if (n > 0) openBy.set(userId, n);
      else openBy.delete(userId);
    });

    const release = after ? await replayTurn(userId, reply) : () => {};
    if (!release) {
      // The client left while it waited: nothing to answer.
      reply.hijack();
      return;
    }
    reply.raw.once("close", release);
    try {
      await openStream(request, reply, source, channels, after);
    } finally {
      release();
    }
  }

  /** Opens the hub's clients of `channels` on the reply, replays what is stored after `after`, goes live. */
  async function openStream(
    request: FastifyRequest,
    reply: FastifyReply,
    source: SourceRecord,
    channels: string[],
    after: EventIdParts | undefined,
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
    // The stream lasts only as long as what let it open: a key revoked, a session ended or a membership
    // gone ends it within `recheckMs` (each check is the request's own authentication, run again).
    const check = () => {
      void (async () => {
        request.principal = await options.authenticator.principal(request);
        await visibleSource(app, request, id);
      })().catch(() => {
        // Ended cleanly, as when the source is deleted: the client's reconnection then gets the 401 or 404.
        for (const client of clients) client.end();
      });
    };
    const recheck = setInterval(check, hub.options.recheckMs);
    recheck.unref();
    // A revocation on this node is checked at once (`access.revoked`); one on another node, at the interval.
    const userId = principal(request).user.id;
    const checks = checksBy.get(userId) ?? new Set<() => void>();
    checksBy.set(userId, checks.add(check));
    reply.raw.once("close", () => {
      clearInterval(recheck);
      checks.delete(check);
      if (checks.size === 0 && checksBy.get(userId) === checks) checksBy.delete(userId);
    });
    if (reply.raw.destroyed) {
      // The client left while the store was read.
      for (const client of clients) client.abandon();
      return;
    }
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
