/** `fount sessions list` and `fount sessions revoke`: console sign-ins, yours or (admin) another user's. */
import type { Command } from "../command.ts";
import { formatTime, table } from "../output.ts";

/** A console session as the API renders it. */
interface Session {
  id: string;
  user_id: string;
  created_at: number;
  expires_at: number;
  address: string | null;
  user_agent: string | null;
  current: boolean;
}

const userOption = {
  type: "string",
  value: "u_…",
  description: "Another user's sessions (admin key)",
} as const;

/** Where a user's sessions are: your own, or with --user the admin API's view of that user. */
const sessionsPath = (user: string | undefined) =>
  user === undefined ? "/v1/users/me/sessions" : `/v1/admin/users/${encodeURIComponent(user)}/sessions`;

const listSessions: Command = {
  name: "sessions list",
  summary: "List console sessions (signed-in browsers), newest first",
  usage: "[--user <u_…>]",
  options: { user: userOption },
  description: [
    "Each console sign-in is a session of its user for 12 hours, until it signs out or is revoked; a",
    "user holds at most 20 at once (signing in past that ends the oldest).",
    "",
    "Examples:",
    "  fount sessions list",
    "  fount sessions list --user u_8bXq2L --json",
  ].join("\n"),
  async run(ctx) {
    const res = await ctx.client().get<{ data: Session[] }>(sessionsPath(ctx.string("user")));
    const items = res.data;
    ctx.output(items, () => {
      if (items.length === 0) return ctx.print("No console sessions.");
      ctx.print(
        table(items, [
          { header: "ID", value: (s) => s.id },
          { header: "SIGNED IN", value: (s) => formatTime(s.created_at) },
          { header: "EXPIRES", value: (s) => formatTime(s.expires_at) },
          { header: "ADDRESS", value: (s) => s.address ?? "" },
          { header: "USER AGENT", value: (s) => s.user_agent ?? "" },
        ]),
      );
    });
  },
};

const revokeSession: Command = {
  name: "sessions revoke",
  summary: "End a console session: its browser is signed out on its next request",
  usage: "<ses_…> [--user <u_…>]",
  args: { min: 1, max: 1 },
  options: { user: userOption },
  description:
    "Examples:\n  fount sessions revoke ses_2bXq9LmP0aZt\n  fount sessions revoke ses_2bXq9LmP0aZt --user u_8bXq2L",
  async run(ctx) {
    const id = ctx.arg(0, "<ses_…>");
    const res = await ctx
      .client()
      .delete<{ data: { id: string } }>(`${sessionsPath(ctx.string("user"))}/${encodeURIComponent(id)}`);
    ctx.output(res.data, () => ctx.print(`Revoked console session ${res.data.id}.`));
  },
};

export const sessionCommands: Command[] = [listSessions, revokeSession];
