/**
 * `fount deliveries show <del_…>`: one delivery's attempts as a timeline, each with the request sent and
 * the answer received; and `fount replay` (also `fount events replay`): send a kept event again, or every
 * kept event of a source in a time range, to a listener, after a count and a confirmation.
 */
import { CliError, type Command, type Context, UsageError } from "../command.ts";
import { printable } from "../output.ts";
import { resolveSource, resolveWebhook } from "../resolve.ts";
import type { Painter } from "../terminal.ts";
import { searchOptions, searchQuery } from "./event-search.ts";

/** An attempt as GET /v1/deliveries/{id} renders it. */
interface Attempt {
  n: number;
  at_ms: number;
  duration_ms: number;
  request: { url: string | null; headers: Record<string, string> | null; body: string };
  response: {
    status: number;
    headers: Record<string, string | string[]> | null;
    body: string | null;
    truncated: boolean;
  } | null;
  error: string | null;
  error_kind: string | null;
  outcome: "succeeded" | "retry" | "failed";
}

/** A delivery as GET /v1/deliveries/{id} renders it. */
interface DeliveryDetail {
  id: string;
  event_id: string;
  emitter_id: string;
  event_name: string;
  listener_id: string;
  listener_kind: string;
  status: "pending" | "succeeded" | "failed";
  attempt_count: number;
  next_attempt_at: number | null;
  created_at: number;
  replay: { id: string; replayed_from: string | null } | null;
  attempts: Attempt[];
}

const deliveryId = /^del_[A-Za-z0-9]+$/;
const eventId = /^\d{1,15}-\d{1,9}$/;
/** Characters of a body shown without `--full`. */
const shownBody = 2_000;

const statusStyle = { pending: "yellow", succeeded: "green", failed: "red", retry: "yellow" } as const;

/** A status or outcome, coloured by what it is (red when it is none the API names). */
const painted = (paint: Painter, status: string) =>
  paint(
    Object.hasOwn(statusStyle, status) ? statusStyle[status as keyof typeof statusStyle] : "red",
    printable(status),
  );

/** A body (what was sent, what a receiver answered) as lines under `indent`, shown, never obeyed. */
function bodyText(text: string, full: boolean, indent: string): string {
  const shown =
    full || text.length <= shownBody
      ? text
      : `${text.slice(0, shownBody)}… (${text.length} characters; --full shows all)`;
  return indent + printable(shown, { lines: true }).replace(/\n/g, `\n${indent}`);
}

function headerLines(headers: Record<string, string | string[]> | null, indent: string): string[] {
  if (!headers) return [];
  return Object.entries(headers).flatMap(([k, v]) =>
    (Array.isArray(v) ? v : [v]).map((x) => `${indent}${printable(`${k}: ${x}`)}`),
  );
}

/** A delivery and its attempts for people: a heading, then each attempt with its request and answer. */
export function formatDelivery(d: DeliveryDetail, paint: Painter, full = false): string {
  const channel = d.event_name === "" ? "" : ` [${d.event_name}]`;
  const lines = [
    `${paint("bold", printable(d.id))}  ${painted(paint, d.status)}  ${printable(`to ${d.listener_id} (${d.listener_kind})`)}`,
    printable(
      `event ${d.emitter_id} ${d.event_id}${channel}, created ${new Date(d.created_at * 1000).toISOString()}`,
    ),
  ];
  if (d.replay)
    lines.push(
      printable(
        `replay ${d.replay.id}${d.replay.replayed_from ? ` of ${d.replay.replayed_from}` : " (no earlier delivery to this listener)"}`,
      ),
    );
  if (d.next_attempt_at !== null)
    lines.push(`next attempt ${new Date(d.next_attempt_at * 1000).toISOString()}`);
  if (d.attempts.length === 0) lines.push("", "No attempt yet.");
  for (const a of d.attempts) {
    const code = a.response ? ` ${a.response.status}` : "";
    lines.push(
      "",
      `${printable(`#${a.n}  ${new Date(a.at_ms).toISOString()}`)}  ${painted(paint, a.outcome)}${printable(`${code}  ${a.duration_ms} ms`)}`,
    );
    if (a.request.url !== null) lines.push(`  → POST ${printable(a.request.url)}`);
    else lines.push("  → run of the listener source with the event");
    lines.push(...headerLines(a.request.headers, "    "));
    lines.push(bodyText(a.request.body, full, "    "));
    if (a.response) {
      lines.push(printable(`  ← ${a.response.status}`), ...headerLines(a.response.headers, "    "));
      if (a.response.body !== null)
        lines.push(
          `${bodyText(a.response.body, full, "    ")}${a.response.truncated ? " (cut at 64 KB)" : ""}`,
        );
    } else lines.push("  ← no answer");
    if (a.error) {
      const kind = a.error_kind ? ` (${printable(a.error_kind)})` : "";
      lines.push(`  ${paint("red", `error${kind}:`)} ${printable(a.error)}`);
    }
  }
  return lines.join("\n");
}

const show: Command = {
  name: "deliveries show",
  summary: "Show one delivery's attempts: what was sent and what came back",
  usage: "<del_…> [--full]",
  args: { min: 1, max: 1 },
  options: {
    full: { type: "boolean", description: `Show whole bodies (otherwise the first ${shownBody} characters)` },
  },
  description: [
    "Each attempt shows when it started, its outcome, the answer's status and its duration; the request (URL,",
    "the headers Fount set with the signature, the body) and the answer (headers, the first 64 KB of its body),",
    "or the error in words (DNS, TLS, timeout, refused…). --json prints the API's answer.",
    "",
    "Examples:",
    "  fount deliveries show del_0Fh2kQ9xAbCdEfGh1234",
    "  fount deliveries show del_0Fh2kQ9xAbCdEfGh1234 --full",
  ].join("\n"),
  async run(ctx) {
    const id = ctx.arg(0, "<del_…>");
    if (!deliveryId.test(id))
      throw new UsageError(`Give a delivery ID (del_…), not "${id}"`, ctx.command.name);
    const res = await ctx.client().get<{ data: DeliveryDetail }>(`/v1/deliveries/${encodeURIComponent(id)}`);
    ctx.output(res.data, () => ctx.print(formatDelivery(res.data, ctx.paint, ctx.boolean("full"))));
    return 0;
  },
};

/** A listener named by its ID (webhook, source or workflow), or a webhook by its URL or name. */
async function resolveListener(ctx: Context, ref: string): Promise<string> {
  if (/^(dc|p|wh)_[A-Za-z0-9]+$/.test(ref)) return ref;
  return (await resolveWebhook(ctx.client(), ref)).id;
}

/** Whether to go on replaying `n` events: `--yes`, or a yes on the terminal; without either, exit 2. */
async function confirmReplay(ctx: Context, question: string): Promise<boolean> {
  if (ctx.boolean("yes")) return true;
  if (!ctx.interactive)
    throw new CliError(
      "Not replaying: pass --yes to replay without a terminal to confirm on",
      "confirmation_required",
      2,
    );
  if (await ctx.confirm(question)) return true;
  ctx.note("Nothing replayed.");
  return false;
}

const replay: Command = {
  name: "replay",
  aliases: ["events replay"],
  summary: "Send kept events of a source again to a webhook, source or workflow",
  usage:
    "<dc_…|name> [<event id>] --to <listener> [--event-name <name>] [--search <words>] [--where <path:value>]… [--since <time>] [--until <time>] [--yes]",
  args: { min: 1, max: 2 },
  options: {
    to: { type: "string", value: "listener", description: "wh_…, dc_… or p_…, or a webhook's URL or name" },
    "event-name": {
      type: "string",
      value: "name",
      description: "Channel of a range replay (default: the default channel)",
    },
    ...searchOptions,
    yes: { type: "boolean", short: "y", description: "Replay without asking (needed without a terminal)" },
  },
  description: [
    "With an event ID, that event is sent again; without one, every kept event of the channel that the search",
    "options find (all of them without any), oldest first, after the count is shown and confirmed (at most",
    "10,000 per replay). Each is a new",
    "delivery, marked as a replay (fount deliveries show tells), sent whether or not the listener is subscribed.",
    "",
    "Examples:",
    "  fount replay my-source 1714000000000-0 --to wh_AqcxIUtDafgp",
    "  fount events replay my-source --to https://example.com/hook --since 2h --yes",
    "  fount replay my-source --to wh_AqcxIUtDafgp --search refund --where body.user.id:42",
  ].join("\n"),
  async run(ctx) {
    const ref = ctx.arg(0, "<source>");
    const event = ctx.args[1];
    const to = ctx.requireString("to");
    if (event !== undefined && !eventId.test(event))
      throw new UsageError(`Give an event ID like 1714000000000-0, not "${event}"`, ctx.command.name);
    const range = { event_name: ctx.string("event-name"), ...searchQuery(ctx) };
    if (event !== undefined && Object.values(range).some((v) => v !== undefined))
      throw new UsageError(
        "--event-name and the search options select events: give them without an event ID",
        ctx.command.name,
      );
    const client = ctx.client();
    const source = await resolveSource(client, ref);
    const listener = await resolveListener(ctx, to);
    const base = `/v1/sources/${encodeURIComponent(source.id)}/events`;
    type Answer = {
      data: { replayed: number; matching: number; replay_id: string | null; delivery_id?: string };
    };
    if (event !== undefined) {
      const res = await client.post<Answer>(`${base}/${encodeURIComponent(event)}/replay`, {
        listener_id: listener,
      });
      ctx.output(res.data, () =>
        ctx.print(
          printable(
            `Replaying ${event} to ${listener}: delivery ${res.data.delivery_id} (replay ${res.data.replay_id}).`,
          ),
        ),
      );
      return 0;
    }
    const body = { listener_id: listener, ...range };
    const counted = await client.post<Answer>(`${base}/replay`, { ...body, dry_run: true });
    const n = counted.data.matching;
    const events = `${n} event${n === 1 ? "" : "s"}`;
    if (n === 0) {
      ctx.output(counted.data, () =>
        ctx.print(printable(`No kept events of ${source.name_slug} match: nothing to replay.`)),
      );
      return 0;
    }
    if (!(await confirmReplay(ctx, `Replay ${events} of ${source.name_slug} to ${listener}?`))) return 1;
    const res = await client.post<Answer>(`${base}/replay`, body);
    ctx.output(res.data, () =>
      ctx.print(
        printable(
          `Replaying ${res.data.replayed} of ${events} to ${listener} (replay ${res.data.replay_id}).`,
        ),
      ),
    );
    return 0;
  },
};

export const deliveryHistoryCommands: Command[] = [show, replay];
