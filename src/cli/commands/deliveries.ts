/**
 * `fount deliveries <webhook>`: a webhook's deliveries (status, attempts, last answer, next attempt),
 * filtered by status, time and answer code, and sending them again (`--redeliver <del_…>`,
 * `--redeliver-failed [--since <time>]`). One delivery's attempts: `fount deliveries show`
 * (delivery-history.ts).
 */
import { deliveryStatuses } from "../../domain/types.ts";
import { type Command, UsageError } from "../command.ts";
import { formatTime, printable, table } from "../output.ts";
import { resolveWebhook } from "../resolve.ts";
import type { Painter } from "../terminal.ts";
import { timeOf } from "../times.ts";
import { count, maxEvents } from "./events.ts";

/** A delivery as GET /v1/webhooks/{id}/deliveries renders it. */
interface Delivery {
  id: string;
  event_id: string;
  emitter_id: string;
  event_name: string;
  status: "pending" | "succeeded" | "failed";
  attempts: number;
  last_status_code: number | null;
  last_error: string | null;
  duration_ms: number | null;
  next_attempt_at: number | null;
  created_at: number;
}

const deliveryId = /^del_[A-Za-z0-9]+$/;
const statusStyle = { pending: "yellow", succeeded: "green", failed: "red" } as const;

function deliveryTable(items: Delivery[], paint: Painter): string {
  const shorten = (text: string | null) =>
    text === null ? "" : text.length > 48 ? `${text.slice(0, 47)}…` : text;
  return table(items, [
    { header: "ID", value: (d) => d.id },
    { header: "STATUS", value: (d) => d.status },
    { header: "ATTEMPTS", value: (d) => d.attempts },
    { header: "CODE", value: (d) => d.last_status_code ?? "" },
    { header: "DURATION", value: (d) => (d.duration_ms === null ? "" : `${d.duration_ms} ms`) },
    { header: "NEXT ATTEMPT", value: (d) => formatTime(d.next_attempt_at) },
    { header: "CREATED", value: (d) => formatTime(d.created_at) },
    { header: "EVENT", value: (d) => `${d.emitter_id} ${d.event_id}` },
    { header: "LAST ERROR", value: (d) => shorten(d.last_error) },
    // Colour is added after the widths are measured, so escapes do not skew the columns.
  ]).replace(/│ (pending|succeeded|failed)( +)│/g, (_, status: keyof typeof statusStyle, pad: string) => {
    return `│ ${paint(statusStyle[status], status)}${pad}│`;
  });
}

const deliveries: Command = {
  name: "deliveries",
  summary: "List a webhook's deliveries, or send some again",
  usage:
    "<wh_…|url|name> [-n <count>] [--status <status>] [--code <code>] [--since <time>] [--until <time>] [--redeliver <del_…> | --redeliver-failed [--since <time>]]",
  args: { min: 1, max: 1 },
  options: {
    n: {
      type: "string",
      short: "n",
      value: "count",
      description: `How many, newest first (1–${maxEvents}, default 20)`,
    },
    status: {
      type: "string",
      value: "pending|succeeded|failed",
      description: "Only deliveries in this state",
    },
    redeliver: {
      type: "string",
      value: "del_…",
      description: "Send this delivery again now (any status), with a fresh retry schedule",
    },
    "redeliver-failed": {
      type: "boolean",
      description: "Send again every failed delivery created since --since",
    },
    since: {
      type: "string",
      value: "time",
      description:
        "Deliveries created since: 30m, 2h, 7d ago, a date or date-time, epoch seconds (default: all kept)",
    },
    until: { type: "string", value: "time", description: "Deliveries created before (same forms)" },
    code: {
      type: "string",
      value: "code",
      description: "Only deliveries whose last answer had this HTTP status: 503, or a class like 5xx",
    },
  },
  description: [
    "The webhook is named by its ID, URL or name, or a unique start of one. Columns: status, attempts made, the last answer's HTTP",
    "code and duration, when the next attempt is due (pending ones), the routed event, the last error.",
    "A redelivery keeps the delivery's ID, so the receiver sees the same webhook-id header. Finished",
    "deliveries are kept 7 days. `fount deliveries show <del_…>` shows one delivery's attempts.",
    "",
    "Examples:",
    "  fount deliveries wh_AqcxIUtDafgp --status failed",
    "  fount deliveries wh_AqcxIUtDafgp --code 5xx --since 2h",
    "  fount deliveries https://example.com/hook --redeliver del_0Fh2kQ9xAbCdEfGh1234",
    "  fount deliveries wh_AqcxIUtDafgp --redeliver-failed --since 2h",
  ].join("\n"),
  async run(ctx) {
    const ref = ctx.arg(0, "<wh_…|url|name>");
    const one = ctx.string("redeliver");
    const failed = ctx.boolean("redeliver-failed");
    if (one !== undefined && failed)
      throw new UsageError("Give --redeliver or --redeliver-failed, not both", ctx.command.name);
    if (one !== undefined && !deliveryId.test(one))
      throw new UsageError(`--redeliver takes a del_… ID, not "${one}"`, ctx.command.name);
    const since = timeOf(ctx, "since") ?? 0;
    const until = timeOf(ctx, "until");
    const code = ctx.string("code");
    if (code !== undefined && !/^([1-5]\d\d|[1-5]xx)$/.test(code))
      throw new UsageError(
        `--code takes an HTTP status (503) or a class (5xx), not "${code}"`,
        ctx.command.name,
      );
    if (one !== undefined && (ctx.string("since") ?? until ?? code) !== undefined)
      throw new UsageError(
        "--since, --until and --code filter a list: give them without --redeliver",
        ctx.command.name,
      );
    if (failed && (until ?? code) !== undefined)
      throw new UsageError("--redeliver-failed takes --since only", ctx.command.name);
    const status = ctx.choice("status", deliveryStatuses);
    const limit = count(ctx, 20);

    const client = ctx.client();
    const webhook = (await resolveWebhook(client, ref)).id;
    const base = `/v1/webhooks/${encodeURIComponent(webhook)}`;
    if (one !== undefined) {
      const res = await client.post<{ data: Delivery }>(
        `${base}/deliveries/${encodeURIComponent(one)}/redeliver`,
      );
      ctx.output(res.data, () =>
        ctx.print(printable(`Redelivering ${one}: it is ${res.data.status} again, due now.`)),
      );
      return 0;
    }
    if (failed) {
      const res = await client.post<{ data: { count: number } }>(`${base}/redeliver`, { since });
      const n = res.data.count;
      const from = since === 0 ? "" : ` created since ${formatTime(since)}`;
      ctx.output(res.data, () =>
        ctx.print(`Redelivering ${n} failed deliver${n === 1 ? "y" : "ies"} of ${webhook}${from}.`),
      );
      return 0;
    }
    const filters = {
      status,
      status_code: code,
      since: since === 0 ? undefined : since * 1000,
      until: until === undefined ? undefined : until * 1000,
    };
    const items = await client.listAll<Delivery>(`${base}/deliveries`, filters, limit);
    ctx.output(items, () => {
      const filtered = Object.values(filters).some((v) => v !== undefined);
      if (items.length === 0)
        return ctx.print(
          `No deliveries to ${webhook}${status && !code ? ` (${status})` : filtered ? " match" : ""}.`,
        );
      ctx.print(deliveryTable(items, ctx.paint));
    });
    return 0;
  },
};

export const deliveryCommands: Command[] = [deliveries];
