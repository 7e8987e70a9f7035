/** `fount events` (a source's emitted events, optionally followed) and `fount logs` (its `$logs` and `$errors`). */
import type { ApiClient, Query } from "../client.ts";
import { type Command, type Context, UsageError } from "../command.ts";
import { formatJson, printable } from "../output.ts";
import { type NamedSource, resolveSource } from "../resolve.ts";
import { compareEventIds, followSource, type StreamEntry, untilInterrupted } from "../sse.ts";
import { type Painter, plain } from "../terminal.ts";
import { refuseFollowedSearch, searching, searchOptions, searchQuery } from "./event-search.ts";

/** The API's largest page, and so the most `-n` can ask for. */
export const maxEvents = 100;

function time(ms: unknown): string {
  return typeof ms === "number" && Number.isFinite(ms) ? new Date(ms).toISOString() : "";
}

/** A value on one line, its control characters shown as escapes (an event's data comes from anyone). */
function oneLine(value: unknown): string {
  return printable(typeof value === "string" ? value : (JSON.stringify(value) ?? "null"));
}

/** A string field of an entry, shown safely; "" when it is not a string. */
const textOf = (value: unknown) => (typeof value === "string" ? printable(value) : "");

/** An emitted event for people: time, ID, channel when not the default, summary; then its data. */
export function formatEntry(e: StreamEntry, paint: Painter = plain): string {
  const name = textOf(e.metadata?.name);
  const channel = name !== "" ? paint("cyan", `[${name}]`) : "";
  const summary = textOf(e.metadata?.summary);
  const head = [
    paint("dim", time(e.indexed_at_ms)),
    paint("dim", textOf(e.id)),
    channel,
    summary && paint("bold", summary),
  ]
    .filter(Boolean)
    .join("  ");
  return `${head}\n  ${oneLine(e.event)}`;
}

const levelStyles: Record<string, Parameters<Painter>[0]> = { error: "red", warn: "yellow", debug: "dim" };

/** A `$logs` or `$errors` entry as one line (an error's stack follows, indented). */
export function formatLogEntry(e: StreamEntry, paint: Painter = plain): string {
  const ev = (e.event ?? {}) as Record<string, any>;
  if (e.metadata?.name === "$errors") {
    const err = (ev.error ?? {}) as Record<string, unknown>;
    const what = paint("red", `[error] ${oneLine(err.code ?? "error")}:`);
    const head = `${paint("dim", time(e.indexed_at_ms))}  ${what} ${oneLine(err.message ?? "")}`;
    const stack = typeof err.stack === "string" ? err.stack.split("\n").slice(1, 6) : [];
    return [head, ...stack.map((l) => paint("dim", `    ${printable(l.trim())}`))].join("\n");
  }
  const level = typeof ev.level === "string" ? printable(ev.level) : "log";
  const style = Object.hasOwn(levelStyles, level) ? levelStyles[level] : undefined;
  const tag = style ? paint(style, `[${level}]`) : `[${level}]`;
  // A message may span lines (console.log of a block), as the component wrote it.
  const message = ev.message == null ? oneLine(ev) : printable(String(ev.message), { lines: true });
  return `${paint("dim", time(typeof ev.ts === "number" ? ev.ts : e.indexed_at_ms))}  ${tag} ${message}`;
}

/** Any entry: `$logs` and `$errors` as log lines, the rest as events (the one view of `fount dev`). */
export function formatAnyEntry(e: StreamEntry, paint: Painter = plain): string {
  const name = e.metadata?.name;
  return name === "$logs" || name === "$errors" ? formatLogEntry(e, paint) : formatEntry(e, paint);
}

/** The `-n <count>` option (1 to the API's largest page), or `fallback` without it. */
export function count(ctx: Context, fallback: number): number {
  const raw = ctx.string("n");
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1 || n > maxEvents)
    throw new UsageError(`-n must be an integer from 1 to ${maxEvents}, not "${raw}"`, ctx.command.name);
  return n;
}

/** The last `n` entries of a channel, oldest first. */
export async function recent(
  client: ApiClient,
  source: string,
  n: number,
  channel?: string,
  search: Query = {},
): Promise<StreamEntry[]> {
  const res = await client.get<{ data: StreamEntry[] }>(
    `/v1/sources/${encodeURIComponent(source)}/event_summaries`,
    { ...search, limit: n, expand: "event", event_name: channel },
  );
  return res.data.slice().reverse();
}

/**
 * Where a live stream picks up after `shown`, the newest entries of its channel: their last ID, or the
 * very start when there were none, so that an event stored while the stream opens is not missed.
 */
export function newestOf(shown: StreamEntry[]): string {
  return shown[shown.length - 1]?.id ?? "0-0";
}

/** A source as the banners name it. */
export const label = (s: NamedSource) => printable(`${s.name_slug} (${s.id})`);

/**
 * Follows channels of a source until Ctrl-C (or `signal`), printing each entry as it comes (one JSON
 * document per line under `--json`). `since` maps each channel to the last ID already shown; `banner`
 * goes to stderr once every stream is open.
 */
export async function follow(
  ctx: Context,
  source: string,
  channels: Array<string | undefined>,
  since: Map<string | undefined, string>,
  print: (e: StreamEntry, paint: Painter) => string,
  signal?: AbortSignal,
  { banner }: { banner?: string } = {},
): Promise<void> {
  const client = ctx.client();
  const stop = signal ? { signal, dispose: () => {} } : untilInterrupted();
  const paint = ctx.paint;
  let open = 0;
  try {
    await Promise.all(
      channels.map((channel) =>
        followSource(client, source, {
          channel,
          lastEventId: since.get(channel),
          signal: stop.signal,
          onOpen: () => {
            if (++open === channels.length && banner !== undefined) ctx.note(banner);
          },
          onEntry: (e) => ctx.print(ctx.json ? formatJson(e, 0) : print(e, paint)),
        }),
      ),
    );
  } finally {
    stop.dispose();
  }
}

const events: Command = {
  name: "events",
  summary: "Show a source's last events, or those a search finds; -f follows new ones",
  usage:
    "<dc_…|name> [-n <count>] [-f] [--search <words>] [--where <path:value>]… [--since <time>] [--until <time>]",
  args: { min: 1, max: 1 },
  options: {
    n: {
      type: "string",
      short: "n",
      value: "count",
      description: `How many recent events (1–${maxEvents}, default 10)`,
    },
    follow: { type: "boolean", short: "f", description: "Keep printing new events as they are emitted" },
    "event-name": {
      type: "string",
      value: "name",
      description: "Channel: default, $logs, $errors or a custom name",
    },
    ...searchOptions,
  },
  description: [
    "Events print oldest first: time, event ID, channel and summary, then the event data on one line.",
    "--search, --where, --since, --until and --delivery-status show the newest events that match instead",
    '(docs/streams.md, "Searching events"); fount events export writes every match as NDJSON.',
    "--json prints the event_summaries entries: an array, or one entry per line with -f.",
    "",
    "Examples:",
    "  fount events my-source -n 20",
    "  fount events dc_4fRt7YpQ1mZx -f",
    '  fount events my-source --search "order 42" --where headers.x-github-event:push --since 2d',
  ].join("\n"),
  async run(ctx) {
    const channel = ctx.string("event-name");
    const following = ctx.boolean("follow");
    const n = count(ctx, 10);
    const search = searchQuery(ctx);
    refuseFollowedSearch(ctx, search);
    const client = ctx.client();
    const named = await resolveSource(client, ctx.arg(0, "<source>"));
    const source = named.id;
    const shown = await recent(client, source, n, channel, search);
    if (ctx.json && !following) {
      ctx.print(formatJson(shown));
      return 0;
    }
    for (const e of shown) ctx.print(ctx.json ? formatJson(e, 0) : formatEntry(e, ctx.paint));
    if (!following) {
      if (shown.length === 0 && !ctx.json)
        ctx.note(searching(search) ? "No event matches." : "No events yet.");
      return 0;
    }
    const on = channel ? ` on its ${channel} channel` : "";
    await follow(ctx, source, [channel], new Map([[channel, newestOf(shown)]]), formatEntry, undefined, {
      banner: `Printing the events ${label(named)} emits${on} as they come (Ctrl-C to stop)…`,
    });
    return 0;
  },
};

const logs: Command = {
  name: "logs",
  summary: "Show a source's recent logs and errors and follow new ones",
  usage: "<dc_…|name> [-n <count>] [--no-follow]",
  args: { min: 1, max: 1 },
  options: {
    n: {
      type: "string",
      short: "n",
      value: "count",
      description: `How many recent entries of each (1–${maxEvents}, default 10)`,
    },
    "no-follow": { type: "boolean", description: "Print the recent entries and exit" },
  },
  description: [
    "Console output of run, hooks and methods is on the $logs channel; thrown errors, refused emits and",
    "timeouts are on $errors. Both are shown, oldest first, then followed until Ctrl-C.",
    "",
    "Examples:",
    "  fount logs my-source",
    "  fount logs my-source -n 50 --no-follow",
  ].join("\n"),
  async run(ctx) {
    const n = count(ctx, 10);
    const client = ctx.client();
    const named = await resolveSource(client, ctx.arg(0, "<source>"));
    const source = named.id;
    const [logEntries, errorEntries] = await Promise.all([
      recent(client, source, n, "$logs"),
      recent(client, source, n, "$errors"),
    ]);
    const merged = [...logEntries, ...errorEntries].sort((a, b) => compareEventIds(a.id, b.id));
    if (ctx.json && ctx.boolean("no-follow")) {
      ctx.print(formatJson(merged));
      return 0;
    }
    for (const e of merged) ctx.print(ctx.json ? formatJson(e, 0) : formatLogEntry(e, ctx.paint));
    if (ctx.boolean("no-follow")) {
      if (merged.length === 0 && !ctx.json) ctx.note("No logs or errors yet.");
      return 0;
    }
    const since = new Map<string | undefined, string>([
      ["$logs", newestOf(logEntries)],
      ["$errors", newestOf(errorEntries)],
    ]);
    await follow(ctx, source, ["$logs", "$errors"], since, formatLogEntry, undefined, {
      banner: `Printing the console output and errors of ${label(named)}'s runs, hooks and methods as they come (Ctrl-C to stop)…`,
    });
    return 0;
  },
};

export const eventCommands: Command[] = [events, logs];
