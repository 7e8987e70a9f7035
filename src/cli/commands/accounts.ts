/** `fount accounts create|list|delete`: app accounts (`apn_…`) whose credentials become an app prop's `$auth`. */
import { readFile } from "node:fs/promises";
import { CliError, type Command, UsageError } from "../command.ts";
import { fields, formatTime, printable, table } from "../output.ts";

/** An app account as the API renders it (credentials only when asked for). */
interface Account {
  id: string;
  app: { name_slug: string };
  name: string;
  healthy: boolean;
  created_at: number;
  updated_at: number;
}

/** `--credentials` text: JSON, or `@file` holding JSON (keeps secrets out of the shell history). */
async function credentials(raw: string, command: string): Promise<Record<string, unknown>> {
  let text = raw;
  if (raw.startsWith("@")) {
    try {
      text = await readFile(raw.slice(1), "utf8");
    } catch (err) {
      throw new CliError(`Cannot read ${raw.slice(1)}: ${(err as Error).message}`, "file_not_found");
    }
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new UsageError("--credentials must be a JSON object (or @file holding one)", command);
  }
  if (!value || typeof value !== "object" || Array.isArray(value))
    throw new UsageError("--credentials must be a JSON object (or @file holding one)", command);
  return value as Record<string, unknown>;
}

const createAccount: Command = {
  name: "accounts create",
  summary: "Connect an app account; its credentials become $auth of app props",
  usage: "<app> --credentials <json|@file> [--name <name>]",
  args: { min: 1, max: 1 },
  options: {
    credentials: {
      type: "string",
      value: "json|@file",
      description: "The $auth object, as JSON or @path of a JSON file",
    },
    name: { type: "string", value: "name", description: "A name for it (default: the app)" },
  },
  description: [
    "<app> is the app's name slug, the `app` of its app file (postgresql, gitlab, slack…). The",
    "credentials are the fields the app reads from this.$auth: e.g. oauth_access_token for OAuth apps,",
    "host/port/user/password/database for postgresql. They are stored encrypted and never shown again.",
    "Deploy with --prop <appProp>=apn_….",
    "",
    "Examples:",
    "  fount accounts create postgresql --credentials @pg.json --name warehouse",
    '  fount accounts create gitlab --credentials \'{"oauth_access_token": "glpat-…"}\'',
  ].join("\n"),
  async run(ctx) {
    const app = ctx.arg(0, "<app>");
    const creds = await credentials(ctx.requireString("credentials"), ctx.command.name);
    const res = await ctx.client().post<{ data: Account }>("/v1/accounts", {
      app,
      name: ctx.string("name"),
      credentials: creds,
    });
    const a = res.data;
    ctx.output(a, () => {
      ctx.print(printable(`Connected ${a.app.name_slug} account ${a.id}.`));
      ctx.print(
        fields([
          ["ID", a.id],
          ["App", a.app.name_slug],
          ["Name", a.name],
        ]),
      );
    });
    return 0;
  },
};

const listAccounts: Command = {
  name: "accounts list",
  aliases: ["list accounts"],
  summary: "List app accounts, newest first",
  usage: "",
  description: "Example:\n  fount accounts list",
  async run(ctx) {
    const items = await ctx.client().listAll<Account>("/v1/accounts");
    ctx.output(items, () => {
      if (items.length === 0) return ctx.print("No app accounts.");
      ctx.print(
        table(items, [
          { header: "ID", value: (a) => a.id },
          { header: "APP", value: (a) => a.app.name_slug },
          { header: "NAME", value: (a) => a.name },
          { header: "CREATED", value: (a) => formatTime(a.created_at) },
        ]),
      );
    });
    return 0;
  },
};

const deleteAccount: Command = {
  name: "accounts delete",
  summary: "Delete an app account",
  usage: "<apn_…>",
  args: { min: 1, max: 1 },
  description:
    "Sources whose app props use it get an empty $auth from then on.\n\nExample:\n  fount accounts delete apn_2kVhLR",
  async run(ctx) {
    const id = ctx.arg(0, "<apn_…>");
    const res = await ctx.client().delete<{ data: { id: string } }>(`/v1/accounts/${encodeURIComponent(id)}`);
    ctx.output(res.data, () => ctx.print(printable(`Deleted app account ${res.data.id}.`)));
    return 0;
  },
};

export const accountCommands: Command[] = [createAccount, listAccounts, deleteAccount];
