/** `fount list webhooks`, `fount webhook create`, `fount webhook delete`. */
import type { Command, Context } from "../command.ts";
import { fields, formatTime, printable, table } from "../output.ts";
import { resolveWebhook } from "../resolve.ts";

/** A webhook as the API renders it. */
interface Webhook {
  id: string;
  name: string | null;
  description: string | null;
  url: string;
  active: boolean;
  created_at: number;
  updated_at: number;
  signing_secret?: string;
}

/** A note the API adds to a webhook it saved (`destination_refused`: deliveries to its URL will be refused). */
export interface Warning {
  code: string;
  message: string;
}

/** The API's warnings, on stderr, whatever the output format. */
export function printWarnings(ctx: Context, warnings: Warning[] | undefined): void {
  for (const w of warnings ?? [])
    ctx.note(`${ctx.paintErr("yellow", "Warning:")} ${printable(`${w.message} (${w.code})`)}`);
}

const listWebhooks: Command = {
  name: "list webhooks",
  aliases: ["list wh"],
  summary: "List webhooks, newest first",
  usage: "",
  description: "Example:\n  fount list webhooks --json",
  async run(ctx) {
    const items = await ctx.client().listAll<Webhook>("/v1/users/me/webhooks");
    ctx.output(items, () => {
      if (items.length === 0) return ctx.print("No webhooks.");
      ctx.print(
        table(items, [
          { header: "ID", value: (w) => w.id },
          { header: "NAME", value: (w) => w.name },
          { header: "URL", value: (w) => w.url },
          { header: "ACTIVE", value: (w) => (w.active ? "yes" : "no") },
          { header: "CREATED", value: (w) => formatTime(w.created_at) },
        ]),
      );
    });
  },
};

const createWebhook: Command = {
  name: "webhook create",
  summary: "Create a webhook; its signing secret is shown only this once",
  usage: "<url> [--name <name>] [--description <text>]",
  args: { min: 1, max: 1 },
  options: {
    name: { type: "string", value: "name", description: "A name for it" },
    description: { type: "string", value: "text", description: "What it is for" },
  },
  description: [
    "Deliveries are signed with Standard Webhooks headers under the signing secret; keep it to verify them.",
    "",
    "Example:",
    "  fount webhook create https://example.com/hook --name example",
  ].join("\n"),
  async run(ctx) {
    const url = ctx.arg(0, "<url>");
    const res = await ctx.client().post<{ data: Webhook; warnings?: Warning[] }>("/v1/webhooks", {
      url,
      name: ctx.string("name"),
      description: ctx.string("description"),
    });
    const w = res.data;
    printWarnings(ctx, res.warnings);
    ctx.output(w, () => {
      ctx.print(
        fields([
          ["Webhook", w.id],
          ["URL", w.url],
          ...(w.name ? [["Name", w.name] as [string, string]] : []),
        ]),
      );
      ctx.print("Signing secret, shown only this once:");
      ctx.print(`  ${printable(String(w.signing_secret))}`);
    });
  },
};

const deleteWebhook: Command = {
  name: "webhook delete",
  summary: "Delete a webhook and the subscriptions that deliver to it",
  usage: "<wh_…|url|name> [--yes]",
  args: { min: 1, max: 1 },
  options: { yes: { type: "boolean", short: "y", description: "Delete without asking" } },
  description: [
    "The webhook is named by its ID, URL or name, or a unique start of one. On a terminal, asks first;",
    "elsewhere it needs --yes.",
    "",
    "Example:",
    "  fount webhook delete wh_2bXq9LmP0aZt",
  ].join("\n"),
  async run(ctx) {
    const client = ctx.client();
    const w = await resolveWebhook(client, ctx.arg(0, "<wh_…|url|name>"));
    const what = printable(`webhook ${w.id} (${w.url})`);
    if (!(await ctx.confirmDelete(what, `Delete ${what} and its subscriptions?`))) return 1;
    const res = await client.delete<{ data: { id: string } }>(`/v1/webhooks/${encodeURIComponent(w.id)}`);
    ctx.output(res.data, () => ctx.print(`Deleted ${what}.`));
  },
};

export const webhookCommands: Command[] = [listWebhooks, createWebhook, deleteWebhook];
