/**
 * The event search in the CLI (docs/cli.md, "Searching and exporting events"): the options that
 * `fount events`, `fount events export` and `fount replay` share (`--search`, `--where`, `--since`,
 * `--until`, `--delivery-status`), and `fount events export`, which streams a source's matching events
 * as NDJSON to stdout or a file, with a progress line on a terminal.
 */

import { once } from "node:events";
import { createWriteStream, type WriteStream } from "node:fs";
import { deliveryStatuses } from "../../domain/types.ts";
import { answerError, errorText, type Query } from "../client.ts";
import { type Command, type Context, type OptionSpec, UsageError } from "../command.ts";
import { escapeJsonControls } from "../output.ts";
import { resolveSource } from "../resolve.ts";
import { timeOf } from "../times.ts";

/** The search's options, for a command's `options`. */
export const searchOptions: Record<string, OptionSpec> = {
  search: {
    type: "string",
    value: "words",
    description:
      'Words found anywhere in the event (all of them, one of 3 characters or more; "…" keeps spaces)',
  },
  where: {
    type: "string",
    multiple: true,
    value: "path:value",
    description:
      "A JSON path's value (repeatable): body.user.id:42, headers.x-github-event:push, path:/hooks/a",
  },
  since: {
    type: "string",
    value: "time",
    description: "Events at or after: 30m, 2h, 7d ago, a date, a date-time, epoch seconds",
  },
  until: { type: "string", value: "time", description: "Events before (same forms)" },
  "delivery-status": {
    type: "string",
    value: "status",
    description: "Events with a delivery that is pending, succeeded or failed",
  },
};

/** The API's search parameters from the options given (all undefined without any). */
export function searchQuery(ctx: Context): Query {
  const where = ctx.flags.where;
  const seconds = (name: string) => {
    const at = timeOf(ctx, name);
    return at === undefined ? undefined : at * 1000;
  };
  return {
    q: ctx.string("search"),
    where: Array.isArray(where) && where.length > 0 ? (where as string[]) : undefined,
    since: seconds("since"),
    until: seconds("until"),
    delivery_status: ctx.choice("delivery-status", deliveryStatuses),
  };
}

/** Whether any search option was given. */
export function searching(query: Query): boolean {
  return Object.values(query).some((v) => v !== undefined);
}

/** Writes `text` to a file stream or the command's stdout, waiting while a file's buffer is full. */
async function write(out: WriteStream | undefined, ctx: Context, text: string): Promise<void> {
  if (!out) {
    ctx.io.stdout.write(text);
    return;
  }
  if (!out.write(text)) await once(out, "drain");
}

const exportEvents: Command = {
  name: "events export",
  summary: "Write a source's matching events as NDJSON, to stdout or a file",
  usage:
    "<dc_…|name> [--search <words>] [--where <path:value>]… [--since <time>] [--until <time>] [--event-name <name>] [-o <file>]",
  args: { min: 1, max: 1 },
  options: {
    ...searchOptions,
    "event-name": {
      type: "string",
      value: "name",
      description: "Channel: default, $logs, $errors or a custom name",
    },
    output: {
      type: "string",
      short: "o",
      value: "file",
      description: "Write to this file instead of stdout",
    },
  },
  description: [
    "One event summary a line (never truncated), newest first: every kept event of the channel that",
    "matches, streamed as the server reads them. On a terminal, stderr shows how many were written.",
    "",
    "Examples:",
    "  fount events export my-source > events.ndjson",
    "  fount events export my-source --search refund --since 7d -o refunds.ndjson",
  ].join("\n"),
  async run(ctx) {
    const query = { ...searchQuery(ctx), event_name: ctx.string("event-name") };
    const client = ctx.client();
    const source = await resolveSource(client, ctx.arg(0, "<source>"));
    // No timeout: an export of a long history takes as long as it takes.
    const res = await client.fetch("GET", `/v1/sources/${encodeURIComponent(source.id)}/events/export`, {
      query,
      timeoutMs: 0,
      headers: { accept: "application/x-ndjson" },
    });
    if (!res.ok) {
      const text = await errorText(res);
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch {}
      throw answerError(res, parsed, "The export");
    }
    const file = ctx.string("output");
    const out = file === undefined ? undefined : createWriteStream(file);
    const progress = ctx.io.stderr.isTTY === true;
    let lines = 0;
    // Streamed: a character split across two chunks is decoded whole.
    const decoder = new TextDecoder();
    try {
      for await (const chunk of res.body ?? []) {
        // The same JSON, with DEL and C1 controls as \u escapes: nothing a terminal showing it obeys.
        const text = escapeJsonControls(decoder.decode(chunk, { stream: true }));
        await write(out, ctx, text);
        for (const c of text) if (c === "\n") lines++;
        if (progress) ctx.io.stderr.write(`\rExported ${lines} events…`);
      }
    } finally {
      if (out)
        await new Promise<void>((resolve, reject) =>
          out.end((err?: Error | null) => (err ? reject(err) : resolve())),
        );
    }
    if (progress)
      ctx.io.stderr.write(
        `\rExported ${lines} event${lines === 1 ? "" : "s"}${file ? ` to ${file}` : ""}.\n`,
      );
    return 0;
  },
};

/** Refuses `-f` with a search: a live stream is not searched. */
export function refuseFollowedSearch(ctx: Context, query: Query): void {
  if (searching(query) && ctx.boolean("follow"))
    throw new UsageError("--follow shows every new event: give it without a search", ctx.command.name);
}

export const eventSearchCommands: Command[] = [exportEvents];
