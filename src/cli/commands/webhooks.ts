/** `fount list webhooks`, `fount webhook create`, `fount webhook delete`. */
import type { Command } from "../command.ts";
import { fields, formatTime, table } from "../output.ts";

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
    const res = await ctx.client().post<{ data: Webhook }>("/v1/webhooks", {
      url,
      name: ctx.string("name"),
      description: ctx.string("description"),
    });
    const w = res.data;
    ctx.output(w, () => {
      ctx.print(
        fields([
          ["Webhook", w.id],
          ["URL", w.url],
          ...(w.name ? [["Name", w.name] as [string, string]] : []),
        ]),
      );
      ctx.print("Signing secret, shown only this once:");
      ctx.print(`  ${w.signing_secret}`);
    });
  },
};

const deleteWebhook: Command = {
  name: "webhook delete",
  summary: "Delete a webhook and the subscriptions that deliver to it",
  usage: "<wh_…>",
  args: { min: 1, max: 1 },
  description: "Example:\n  fount webhook delete wh_2bXq9LmP0aZt",
  async run(ctx) {
    const id = ctx.arg(0, "<wh_…>");
    const res = await ctx.client().delete<{ data: { id: string } }>(`/v1/webhooks/${encodeURIComponent(id)}`);
    ctx.output(res.data, () => ctx.print(`Deleted webhook ${res.data.id}.`));
  },
};

export const webhookCommands: Command[] = [listWebhooks, createWebhook, deleteWebhook];
