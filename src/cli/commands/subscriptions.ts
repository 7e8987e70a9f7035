/** `fount list subscriptions`, `fount subscribe`, `fount unsubscribe`. */
import type { ApiClient } from "../client.ts";
import type { Command, OptionSpec } from "../command.ts";
import { printable, table } from "../output.ts";
import { resolveSource, resolveWebhook } from "../resolve.ts";

/** A subscription as the API renders it; `event_name` "" is the default channel. */
interface Subscription {
  id: string;
  emitter_id: string;
  listener_id: string;
  event_name: string;
}

const channelLabel = (name: string) => (name === "" ? "default" : name);

const emitterId = /^(dc|p)_([A-Za-z0-9]+|\*)$/;
const listenerId = /^(dc|p|wh)_[A-Za-z0-9]+$/;

/**
 * The ID `ref` names: a glob or a workflow's ID as given; a webhook's (`wh_…`) or a source's ID, name,
 * or a unique start of one. An ID-shaped `ref` that names nothing is passed on as given, so that a
 * subscription of a deleted source can still be removed.
 */
async function idOf(client: ApiClient, ref: string, idPattern: RegExp): Promise<string> {
  if (/^(dc|p)_\*$/.test(ref) || ref.startsWith("p_")) return ref;
  try {
    if (ref.startsWith("wh_")) return (await resolveWebhook(client, ref)).id;
    return (await resolveSource(client, ref)).id;
  } catch (err) {
    if (idPattern.test(ref) && (err as { code?: string }).code === "not_found") return ref;
    throw err;
  }
}

/** The emitter and listener of a subscription command, names resolved to IDs. */
async function ends(client: ApiClient, emitter: string, listener: string) {
  const [e, l] = await Promise.all([idOf(client, emitter, emitterId), idOf(client, listener, listenerId)]);
  return { emitter_id: e, listener_id: l };
}

const eventNameOption: OptionSpec = {
  type: "string",
  value: "name",
  description: "Channel: default (the default), $errors, $logs or a custom name",
};

const listSubscriptions: Command = {
  name: "list subscriptions",
  aliases: ["list subs"],
  summary: "List subscriptions",
  usage: "",
  description: "Example:\n  fount list subscriptions",
  async run(ctx) {
    // The list is paged like every other list, so the CLI follows the cursors to the end.
    const data = await ctx.client().listAll<Subscription>("/v1/users/me/subscriptions");
    ctx.output(data, () => {
      if (data.length === 0) return ctx.print("No subscriptions.");
      ctx.print(
        table(data, [
          { header: "ID", value: (s) => s.id },
          { header: "EMITTER", value: (s) => s.emitter_id },
          { header: "LISTENER", value: (s) => s.listener_id },
          { header: "EVENT NAME", value: (s) => channelLabel(s.event_name) },
        ]),
      );
    });
  },
};

const subscribe: Command = {
  name: "subscribe",
  summary: "Route an emitter's channel to a listener (source, workflow or webhook)",
  usage: "<emitter> <listener> [--event-name <name>]",
  args: { min: 2, max: 2 },
  options: { "event-name": eventNameOption },
  description: [
    "The emitter is a source (dc_… or its name) or workflow (p_…), or dc_* / p_* for all of them; the",
    "listener a source (dc_… or its name), workflow or webhook (wh_…). Subscribing twice is not an error.",
    "",
    "Examples:",
    "  fount subscribe new-order wh_2bXq9LmP0aZt",
    "  fount subscribe 'dc_*' wh_2bXq9LmP0aZt --event-name '$errors'",
  ].join("\n"),
  async run(ctx) {
    const client = ctx.client();
    const res = await client.post<{ data: Subscription }>("/v1/subscriptions", {
      ...(await ends(client, ctx.arg(0, "<emitter>"), ctx.arg(1, "<listener>"))),
      event_name: ctx.string("event-name"),
    });
    const s = res.data;
    ctx.output(s, () =>
      ctx.print(
        printable(
          `Subscribed ${s.listener_id} to the ${channelLabel(s.event_name)} channel of ${s.emitter_id} (${s.id}).`,
        ),
      ),
    );
  },
};

const unsubscribe: Command = {
  name: "unsubscribe",
  summary: "Remove a subscription",
  usage: "<emitter> <listener> [--event-name <name>]",
  args: { min: 2, max: 2 },
  options: { "event-name": eventNameOption },
  description:
    "Sources may be named by ID or name, as for subscribe.\n\nExample:\n  fount unsubscribe new-order wh_2bXq9LmP0aZt",
  async run(ctx) {
    const client = ctx.client();
    const res = await client.delete<{ data: Subscription[] }>("/v1/subscriptions", {
      ...(await ends(client, ctx.arg(0, "<emitter>"), ctx.arg(1, "<listener>"))),
      event_name: ctx.string("event-name"),
    });
    ctx.output(res.data, () => {
      for (const s of res.data)
        ctx.print(
          printable(
            `Unsubscribed ${s.listener_id} from the ${channelLabel(s.event_name)} channel of ${s.emitter_id} (${s.id}).`,
          ),
        );
    });
  },
};

export const subscriptionCommands: Command[] = [listSubscriptions, subscribe, unsubscribe];
