/**
 * The event search's parameters (docs/streams.md, "Searching events"), shared by the event lists, the
 * cross-source lists, export and replay: their schema, and their reading into an `EventSearch`, where a
 * bad value is a 400 naming its field.
 *
 * - `q`: words, each found anywhere in the event's JSON text, case-insensitively (all of them);
 *   `"…"` keeps spaces inside one. At least one word has 3 characters or more: both stores' trigram
 *   indexes find the candidates by those words, and a shorter word (`order 42`) is then checked on
 *   each candidate's text.
 * - `where` (repeatable): `<path>:<value>`, split at the first colon. The path names keys of the event
 *   (what the source emitted) from its top, separated by dots: `body.user.id`, `headers.x-github-event`,
 *   `path`. The value at the path equals the value given, as a string, or as the number, `true`,
 *   `false` or `null` it spells (`body.user.id:42` matches 42 and "42").
 * - `since`, `until`: epoch ms or ISO 8601 (parseTime). `delivery_status`: the event has a delivery
 *   in that state (`pending`, `succeeded`, `failed`) that the caller's tenants own.
 */
import { Type } from "typebox";
import type { DeliveryStatus } from "../domain/types.ts";
import { invalidParameter } from "../errors.ts";
import { type EventSearch, type EventWhere, trigramChars } from "../storage/event-search.ts";
import { parseTime, timeParam } from "./history-params.ts";

/** Words of `q` at most: each is one more condition on the index. */
const maxTerms = 10;
/** `where` conditions of one search at most. */
const maxWheres = 20;

/** Keys in a `where` path at most. */
const maxPathKeys = 32;

/** The search's query parameters, for a route's schema. */
export const searchParams = {
  q: Type.Optional(
    Type.String({
      maxLength: 1024,
      description:
        'Words found anywhere in the event (all of them, case-insensitive; one of 3 characters or more); "…" keeps spaces',
    }),
  ),
  where: Type.Optional(
    Type.Union(
      // At most `maxWheres`, checked when read: past a list's maxItems, the union's error named only its
      // first member ("must be string").
      [Type.String({ maxLength: 1024 }), Type.Array(Type.String({ maxLength: 1024 }))],
      {
        description: `<json path>:<value>, repeatable (at most ${maxWheres}): body.user.id:42, headers.x-github-event:push, path:/hooks/a`,
      },
    ),
  ),
  since: Type.Optional(timeParam("Events at or after")),
  until: Type.Optional(timeParam("Events before")),
  delivery_status: Type.Optional(
    Type.Union([Type.Literal("pending"), Type.Literal("succeeded"), Type.Literal("failed")], {
      description: "Events with a delivery in this state",
    }),
  ),
};

/** The search parameters as a route receives them. */
export interface SearchInput {
  q?: string;
  where?: string | string[];
  since?: string | number;
  until?: string | number;
  delivery_status?: DeliveryStatus;
}

/** The words of `q`: split at spaces, except inside double quotes. */
export function parseText(q: string | undefined): string[] | undefined {
  if (q === undefined) return undefined;
  const terms: string[] = [];
  for (const m of q.matchAll(/"([^"]*)"|(\S+)/g)) {
    const term = (m[1] ?? m[2] ?? "").trim();
    if (term === "") continue;
    terms.push(term);
  }
  if (terms.length === 0) throw invalidParameter("q", "q must hold at least one word");
  if (terms.length > maxTerms) throw invalidParameter("q", `q may hold at most ${maxTerms} words`);
  // A search of words shorter than a trigram alone would read every event.
  if (!terms.some((t) => [...t].length >= trigramChars))
    throw invalidParameter(
      "q",
      `q needs a word of at least ${trigramChars} characters, which the index finds events by: add one, or quote a phrase ("order ${terms[0]}")`,
    );
  return terms;
}

/** One `where`: `<path>:<value>`, split at the first colon. */
export function parseWhere(text: string): EventWhere {
  const colon = text.indexOf(":");
  if (colon <= 0)
    throw invalidParameter("where", `where must be <json path>:<value>, as body.user.id:42 (got "${text}")`);
  const path = text.slice(0, colon).split(".");
  if (path.some((k) => k === "" || k.includes('"')))
    throw invalidParameter("where", `The path of where "${text}" has an empty key or a double quote`);
  if (path.length > maxPathKeys)
    throw invalidParameter("where", `The path of where may have at most ${maxPathKeys} keys`);
  return { path, value: text.slice(colon + 1) };
}

/**
 * The parts of an `EventSearch` that the parameters give; `ownerIds` are the caller's tenants (for
 * `delivery_status`).
 */
export function parseSearch(p: SearchInput, ownerIds: string[]): Omit<EventSearch, "channel"> {
  const wheres = p.where === undefined ? undefined : Array.isArray(p.where) ? p.where : [p.where];
  if (wheres && wheres.length > maxWheres)
    throw invalidParameter(
      "where",
      `A search takes at most ${maxWheres} where conditions (got ${wheres.length})`,
    );
  const where = wheres?.map(parseWhere);
  return {
    text: parseText(p.q),
    where,
    sinceMs: parseTime(p.since, "since"),
    untilMs: parseTime(p.until, "until"),
    delivery: p.delivery_status === undefined ? undefined : { status: p.delivery_status, ownerIds },
  };
}
