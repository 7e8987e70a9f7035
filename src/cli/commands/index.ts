/**
 * The command registry. To add a command, write a file in this folder exporting `Command` objects and
 * list them here; main.ts does the parsing, help and errors. Names with several words form groups
 * (`list webhooks`, `list sources`); a new group needs one line in `groups` for its help.
 */
import { adminCommands } from "../admin.ts";
import type { Command } from "../command.ts";
import { accountCommands } from "./accounts.ts";
import { adminListCommands } from "./admin-lists.ts";
import { authCommands } from "./auth.ts";
import { deliveryCommands } from "./deliveries.ts";
import { deliveryHistoryCommands } from "./delivery-history.ts";
import { devCommands } from "./dev.ts";
import { eventSearchCommands } from "./event-search.ts";
import { eventCommands } from "./events.ts";
import { initCommands } from "./init.ts";
import { listenCommands } from "./listen.ts";
import { registryCommands } from "./registry.ts";
import { sessionCommands } from "./sessions.ts";
import { sourceCommands } from "./sources.ts";
import { subscriptionCommands } from "./subscriptions.ts";
import { webhookCommands } from "./webhooks.ts";

export const commands: Command[] = [
  ...authCommands,
  ...sourceCommands,
  ...devCommands,
  ...initCommands,
  ...eventCommands,
  ...eventSearchCommands,
  ...accountCommands,
  ...webhookCommands,
  ...listenCommands,
  ...deliveryCommands,
  ...deliveryHistoryCommands,
  ...subscriptionCommands,
  ...adminCommands,
  ...adminListCommands,
  ...registryCommands,
  ...sessionCommands,
];

/** One line of help for each first word shared by several commands. */
export const groups: Record<string, string> = {
  list: "List resources",
  webhook: "Create and delete webhooks",
  accounts: "Connect app accounts, whose credentials become $auth of app props",
  registry: "Publish components to the server's registry (admin key)",
  sessions: "List and revoke console sessions (signed-in browsers)",
  admin: "Administer accounts on the server's own store (run on the server host; no API key needed)",
};
