/**
 * The source commands, like `pd`'s: `deploy`, `update`, `describe`, `list sources`, `delete` and `run`.
 * A source is named by its `dc_…` ID or its name slug everywhere, or by a unique start of either.
 */
import type { ApiClient } from "../client.ts";
import { CliError, type Command, type Context, UsageError } from "../command.ts";
import { fields, formatTime, printable, table } from "../output.ts";
import type { Choice } from "../picker.ts";
import { resolveSource } from "../resolve.ts";
import { type ComponentFields, componentFields, localComponentFiles, parseProps } from "../source-input.ts";
import { follow, formatEntry, formatLogEntry } from "./events.ts";

/** A source as the API renders it. */
export interface Source {
  id: string;
  owner_id: string;
  component_id: string;
  component_key: string | null;
  configured_props: Record<string, unknown>;
  active: boolean;
  created_at: number;
  updated_at: number;
  name: string;
  name_slug: string;
  endpoint_url?: string;
  /** How long its events are kept; null: the instance's defaults. */
  retention?: { events?: number; days?: number } | null;
}

/** The part of a saved component the commands read. */
interface Component {
  id: string;
  key: string | null;
  name: string;
  version: string;
  code: string;
  configurable_props: Array<{ name: string; type: string; secret?: boolean }>;
}

export const sourcePath = (source: string) => `/v1/sources/${encodeURIComponent(source)}`;

export const propOption = {
  type: "string",
  multiple: true,
  value: "name=value",
  description: "A prop value (repeatable): JSON when it parses, apn_… for app accounts, else a string",
} as const;

/** `--keep-events` and `--keep-days` of deploy and update: the source's retention policy. */
export const retentionOptions = {
  "keep-events": {
    type: "string",
    value: "n",
    description:
      "Events kept per channel, newest first (default: the server's, 100 unless its operator changed it)",
  },
  "keep-days": { type: "string", value: "n", description: "Days an event is kept (default: the server's)" },
} as const;

/** The retention policy the flags give, or undefined when none is given. */
function retentionFlags(ctx: Context): { events?: number; days?: number } | undefined {
  const policy: { events?: number; days?: number } = {};
  for (const [flag, field] of [
    ["keep-events", "events"],
    ["keep-days", "days"],
  ] as const) {
    const raw = ctx.string(flag);
    if (raw === undefined) continue;
    if (!/^[1-9]\d{0,9}$/.test(raw))
      throw new UsageError(`--${flag} must be a whole number of at least 1, got "${raw}"`, ctx.command.name);
    policy[field] = Number(raw);
  }
  return Object.keys(policy).length > 0 ? policy : undefined;
}

function describeRetention(r: Source["retention"]): string {
  if (!r) return "the server's default";
  const parts = [
    ...(r.events !== undefined ? [`${r.events} events per channel`] : []),
    ...(r.days !== undefined ? [`${r.days} days`] : []),
  ];
  return parts.join(", ");
}

export function describeSource(ctx: Context, s: Source): void {
  ctx.print(
    fields([
      ["ID", s.id],
      ["Name", s.name_slug],
      ["Component", s.component_key ? `${s.component_key} (${s.component_id})` : s.component_id],
      ["Active", s.active ? "yes" : "no"],
      ...(s.endpoint_url ? [["Endpoint", s.endpoint_url] as [string, string]] : []),
      ["Retention", describeRetention(s.retention)],
      ["Created", formatTime(s.created_at)],
      ["Updated", formatTime(s.updated_at)],
    ]),
  );
  const props = Object.entries(s.configured_props);
  if (props.length > 0) {
    ctx.print("Props:");
    for (const [name, value] of props) ctx.print(printable(`  ${name}: ${JSON.stringify(value)}`));
  }
}

/**
 * What `fount deploy` without an argument deploys: picked on a terminal from the registry and the
 * component files here; undefined when the person gives up. Without a terminal, a usage error.
 */
async function pickComponent(ctx: Context, client: ApiClient): Promise<string | undefined> {
  if (!ctx.interactive)
    throw new UsageError(
      "Missing <file|url|key>: name what to deploy (`fount list components` lists the registry); the picker needs a terminal",
      ctx.command.name,
    );
  const [files, registry] = await Promise.all([
    localComponentFiles(process.cwd()),
    client.listAll<{ key: string | null; id: string; name: string; version: string }>(
      "/v1/components/registry",
    ),
  ]);
  const choices: Choice[] = [
    ...files.map((f) => ({ label: f, detail: "local file", value: f })),
    ...registry.map((c) => ({
      label: c.key ?? c.id,
      detail: `${c.name} ${c.version} (registry)`,
      value: c.key ?? c.id,
    })),
  ];
  if (choices.length === 0)
    throw new CliError(
      "The registry is empty and this folder has no component files to deploy",
      "nothing_to_pick",
    );
  const { pick } = await import("../picker.ts");
  return (await pick(ctx.io, "Deploy:", choices, ctx.paintErr))?.value;
}

/** What the progress line says while the server saves, builds (installing packages) and deploys. */
export function deployingLabel(target: string, component: ComponentFields): string {
  const what = "key" in component ? `${target} from the registry` : target;
  return `Deploying ${what} (the server builds it and installs any packages it imports)…`;
}

const deploy: Command = {
  name: "deploy",
  summary: "Deploy a source from a local file, a URL or a registry key (or pick one)",
  usage:
    "[<file|url|key>] [--name <name>] [--prop <name=value>]… [--keep-events <n>] [--keep-days <n>] [--follow]",
  args: { min: 0, max: 1 },
  options: {
    name: { type: "string", value: "name", description: "Name of the source (default: the component's)" },
    prop: propOption,
    ...retentionOptions,
    follow: {
      type: "boolean",
      short: "f",
      description: "Then print its events as they are emitted, from the first (Ctrl-C to stop)",
    },
  },
  description: [
    "A local file is bundled with the local files it imports (../app.mjs, ../common/base.mjs…); package",
    "imports stay imports, for the server to install. An http(s) URL is fetched by the server. Anything",
    "else is a component key: your own components first, then the registry. Without one, on a",
    "terminal, it offers the registry's components and the component files in this folder to pick from.",
    "",
    '--prop values: `apn_…` becomes {"authProvisionId": "apn_…"} (app props); JSON is parsed',
    '(numbers, booleans, objects, arrays, "quoted strings"); anything else is a string. Timers take',
    "JSON: --prop 'timer={\"intervalSeconds\":60}'.",
    "",
    "--keep-events and --keep-days set how long its events are kept (its retention); one left out takes",
    "the server's default, and the server refuses more than its maximum.",
    "",
    "Examples:",
    "  fount deploy sources/new-row/new-row.mjs --prop postgresql=apn_2kVhLR --prop schema=public \\",
    "    --prop table=orders",
    "  fount deploy https://example.com/hello.mjs --name hello --follow",
    "  fount deploy http-new-requests",
    "  fount deploy                  # pick from the registry and local files",
  ].join("\n"),
  async run(ctx) {
    const props = parseProps(ctx.flags.prop, ctx.command.name);
    const retention = retentionFlags(ctx);
    const client = ctx.client();
    const target = ctx.args[0] ?? (await pickComponent(ctx, client));
    if (target === undefined) {
      ctx.note("Nothing deployed.");
      return 130;
    }
    const component = await componentFields(target);
    const res = await ctx.progress(deployingLabel(target, component), () =>
      client.post<{ data: Source }>("/v1/sources", {
        ...component,
        name: ctx.string("name"),
        configured_props: props,
        ...(retention ? { retention } : {}),
      }),
    );
    const s = res.data;
    ctx.output(s, () => {
      ctx.print(printable(`Deployed ${s.name_slug} (${s.id}).`));
      describeSource(ctx, s);
    });
    if (ctx.boolean("follow"))
      await follow(ctx, s.id, [undefined], new Map([[undefined, "0-0"]]), formatEntry, undefined, {
        banner: printable(
          `Printing the events ${s.name_slug} (${s.id}) emits as they come (Ctrl-C to stop)…`,
        ),
      });
    return 0;
  },
};

/**
 * The props an update sends when only some are given: the current ones with the new values over them,
 * limited to the props `component` (the new code, or the current one) declares. Secrets are left out
 * (the server keeps a secret that is not sent again) and so is what the server fills in itself.
 */
function mergedProps(
  component: Component,
  current: Source,
  given: Record<string, unknown>,
): Record<string, unknown> {
  const carried = new Set(
    component.configurable_props
      .filter((p) => !p.secret && p.type !== "$.interface.http" && p.type !== "$.service.db")
      .map((p) => p.name),
  );
  const kept = Object.fromEntries(
    Object.entries(current.configured_props).filter(([name]) => carried.has(name)),
  );
  return { ...kept, ...given };
}

/** The component an update with `--prop` moves to: new code saved first (to know its props), else the current one. */
async function targetComponent(
  client: ApiClient,
  fields: ComponentFields | undefined,
  current: Source,
): Promise<Component> {
  if (fields === undefined || "key" in fields) {
    const ref = fields ? fields.key : current.component_id;
    return (await client.get<{ data: Component }>(`/v1/components/${encodeURIComponent(ref)}`)).data;
  }
  return (await client.post<{ data: Component }>("/v1/components", fields)).data;
}

/**
 * The body of PUT /v1/sources/{id} for new code (`fields`) and props: `given` merged over the current
 * props, which takes saving new code first to learn the props it declares.
 */
export async function updateBody(
  client: ApiClient,
  source: string,
  fields: ComponentFields | undefined,
  given: Record<string, unknown>,
): Promise<Record<string, unknown>> {
  const body: Record<string, unknown> = { ...fields };
  if (Object.keys(given).length === 0) return body;
  const current = (await client.get<{ data: Source }>(sourcePath(source))).data;
  const component = await targetComponent(client, fields, current);
  if (fields) {
    // Saved already: the update points at it rather than sending (and building) the code twice.
    delete body.component_code;
    delete body.component_url;
    delete body.key;
    body.component_id = component.id;
  }
  body.configured_props = mergedProps(component, current, given);
  return body;
}

const update: Command = {
  name: "update",
  summary: "Update a source: new code, props, name, or turn it on or off",
  usage:
    "<dc_…|name> [<file|url|key>] [--name <name>] [--prop <name=value>]… [--keep-events <n>] [--keep-days <n> | --keep-default] [--activate | --deactivate]",
  args: { min: 1, max: 2 },
  options: {
    name: { type: "string", value: "name", description: "Rename the source" },
    prop: propOption,
    ...retentionOptions,
    "keep-default": { type: "boolean", description: "Keep its events as the server's defaults say again" },
    activate: { type: "boolean", description: "Turn the source on (its timers and endpoint work again)" },
    deactivate: { type: "boolean", description: "Turn the source off" },
  },
  description: [
    "New code or props run the deactivate hook, swap, then run the activate hook; the ID, endpoint,",
    "db and events stay. Props not given keep their values. --keep-events and --keep-days replace its",
    "retention (one left out takes the server's default); a smaller one is pruned in the background.",
    "",
    "Examples:",
    "  fount update my-source sources/new-row/new-row.mjs",
    "  fount update dc_4fRt7YpQ1mZx --prop 'timer={\"intervalSeconds\":300}'",
    "  fount update my-source --deactivate",
    "  fount update my-source --keep-events 10000 --keep-days 30",
  ].join("\n"),
  async run(ctx) {
    const ref = ctx.arg(0, "<source>");
    if (ctx.boolean("activate") && ctx.boolean("deactivate"))
      throw new UsageError("Give --activate or --deactivate, not both", ctx.command.name);
    const given = parseProps(ctx.flags.prop, ctx.command.name);
    const retention = retentionFlags(ctx);
    if (retention && ctx.boolean("keep-default"))
      throw new UsageError("Give --keep-events/--keep-days or --keep-default, not both", ctx.command.name);
    const target = ctx.args[1];
    const fields = target === undefined ? undefined : await componentFields(target);
    const client = ctx.client();
    const source = (await resolveSource(client, ref)).id;
    const body = await updateBody(client, source, fields, given);
    if (ctx.string("name") !== undefined) body.name = ctx.string("name");
    if (ctx.boolean("activate")) body.active = true;
    if (ctx.boolean("deactivate")) body.active = false;
    if (retention) body.retention = retention;
    if (ctx.boolean("keep-default")) body.retention = null;
    if (Object.keys(body).length === 0)
      throw new UsageError(
        "Nothing to update: give code, --name, --prop, --keep-events, --keep-days, --keep-default, --activate or --deactivate",
        ctx.command.name,
      );
    const res = await ctx.progress(printable(`Updating ${source}…`), () =>
      client.put<{ data: Source }>(sourcePath(source), body),
    );
    const s = res.data;
    ctx.output(s, () => {
      ctx.print(printable(`Updated ${s.name_slug} (${s.id}).`));
      describeSource(ctx, s);
    });
    return 0;
  },
};

const describe: Command = {
  name: "describe",
  summary: "Show a source: ID, name, component, endpoint, props",
  usage: "<dc_…|name> [--code]",
  args: { min: 1, max: 1 },
  options: { code: { type: "boolean", description: "Print the component's code instead" } },
  description: "Examples:\n  fount describe my-source\n  fount describe dc_4fRt7YpQ1mZx --code > source.mjs",
  async run(ctx) {
    const client = ctx.client();
    const s = await resolveSource<Source>(client, ctx.arg(0, "<source>"));
    if (ctx.boolean("code")) {
      const c = (await client.get<{ data: Component }>(`/v1/components/${s.component_id}`)).data;
      ctx.output({ id: c.id, key: c.key, version: c.version, code: c.code }, () =>
        ctx.io.stdout.write(c.code.endsWith("\n") ? c.code : `${c.code}\n`),
      );
      return 0;
    }
    ctx.output(s, () => describeSource(ctx, s));
    return 0;
  },
};

const listSources: Command = {
  name: "list sources",
  aliases: ["list so"],
  summary: "List sources, newest first",
  usage: "",
  description: "With --org, the organization's.\n\nExample:\n  fount list sources",
  async run(ctx) {
    const client = ctx.client();
    const path = client.orgId
      ? `/v1/orgs/${encodeURIComponent(client.orgId)}/sources`
      : "/v1/users/me/sources";
    const items = await client.listAll<Source>(path);
    ctx.output(items, () => {
      if (items.length === 0) return ctx.print("No sources.");
      ctx.print(
        table(items, [
          { header: "ID", value: (s) => s.id },
          { header: "NAME", value: (s) => s.name_slug },
          { header: "COMPONENT", value: (s) => s.component_key ?? s.component_id },
          { header: "ACTIVE", value: (s) => (s.active ? "yes" : "no") },
          { header: "CREATED", value: (s) => formatTime(s.created_at) },
        ]),
      );
    });
    return 0;
  },
};

const remove: Command = {
  name: "delete",
  summary: "Delete a source (runs its deactivate hook; its events go too)",
  usage: "<dc_…|name> [--yes]",
  args: { min: 1, max: 1 },
  options: { yes: { type: "boolean", short: "y", description: "Delete without asking" } },
  description: [
    "On a terminal, asks first, naming the source found; elsewhere (a script, CI) it needs --yes.",
    "",
    "Examples:",
    "  fount delete my-source",
    "  fount delete dc_4fRt7YpQ1mZx --yes",
  ].join("\n"),
  async run(ctx) {
    const client = ctx.client();
    const s = await resolveSource(client, ctx.arg(0, "<source>"));
    const what = printable(`source ${s.name_slug} (${s.id})`);
    if (!(await ctx.confirmDelete(what, `Delete ${what} and all its events?`))) return 1;
    const res = await client.delete<{ data: { id: string } }>(sourcePath(s.id));
    ctx.output(res.data, () => ctx.print(`Deleted ${what}.`));
    return 0;
  },
};

/** What POST /v1/sources/{id}/run answers. */
interface RunOutcome {
  ok: boolean;
  emits: Array<{ id: string; indexed_at_ms: number; event: unknown; metadata: Record<string, unknown> }>;
  logs: Array<{ level: string; message: string; ts: number }>;
  error: { code: string; message: string; stack?: string } | null;
  duration_ms: number;
}

const run: Command = {
  name: "run",
  summary: "Run a source now and show what it emitted and logged",
  usage: "<dc_…|name> [--event <json>]",
  args: { min: 1, max: 1 },
  options: {
    event: {
      type: "string",
      value: "json",
      description: "The event passed to run (default: a timer-like {timestamp, manual: true})",
    },
  },
  description: [
    "Exits 1 when run throws; the error is also on the source's $errors channel.",
    "",
    "Examples:",
    "  fount run my-source",
    '  fount run my-source --event \'{"body": {"hello": "world"}}\'',
  ].join("\n"),
  async run(ctx) {
    const raw = ctx.string("event");
    let event: unknown;
    if (raw !== undefined) {
      try {
        event = JSON.parse(raw);
      } catch {
        throw new UsageError(`--event must be JSON, not ${JSON.stringify(raw)}`, ctx.command.name);
      }
    }
    const client = ctx.client();
    const source = (await resolveSource(client, ctx.arg(0, "<source>"))).id;
    const res = await client.post<{ data: RunOutcome }>(`${sourcePath(source)}/run`, { event });
    const o = res.data;
    ctx.output(o, () => {
      const n = o.emits.length;
      ctx.print(
        `${o.ok ? "Ran" : "Failed"} in ${Math.round(o.duration_ms)} ms: ${n} event${n === 1 ? "" : "s"} emitted.`,
      );
      for (const e of o.emits) ctx.print(formatEntry(e, ctx.paint));
      for (const l of o.logs) {
        ctx.print(
          formatLogEntry({ id: "", indexed_at_ms: l.ts, event: l, metadata: { name: "$logs" } }, ctx.paint),
        );
      }
      if (o.error) ctx.print(ctx.paint("red", printable(`Error: ${o.error.code}: ${o.error.message}`)));
    });
    return o.ok ? 0 : 1;
  },
};

export const sourceCommands: Command[] = [deploy, update, describe, listSources, remove, run];
