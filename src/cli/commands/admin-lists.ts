/**
 * `fount list users` and `fount list orgs`: every user and organization, through the admin API
 * (`GET /v1/admin/users`, `/v1/admin/orgs`) with an admin key, from any machine that reaches the server
 * (the `admin` group works on the server's store, on its host).
 */
import type { Command } from "../command.ts";
import { formatTime, table } from "../output.ts";

/** A user as the admin API renders it. */
interface User {
  id: string;
  username: string;
  email: string;
  plan: string;
  is_admin: boolean;
  created_at: number;
}

/** An organization as the admin API renders it. */
interface Org {
  id: string;
  orgname: string;
  name: string;
  email: string;
  owner_id: string;
  created_at: number;
}

const listUsers: Command = {
  name: "list users",
  summary: "List every user, newest first (admin key)",
  usage: "",
  description: "Example:\n  fount list users --json",
  async run(ctx) {
    const users = await ctx.client().listAll<User>("/v1/admin/users");
    ctx.output(users, () =>
      ctx.print(
        table(users, [
          { header: "ID", value: (u) => u.id },
          { header: "USERNAME", value: (u) => u.username },
          { header: "EMAIL", value: (u) => u.email },
          { header: "PLAN", value: (u) => u.plan },
          { header: "ADMIN", value: (u) => (u.is_admin ? "yes" : "no") },
          { header: "CREATED", value: (u) => formatTime(u.created_at) },
        ]),
      ),
    );
  },
};

const listOrgs: Command = {
  name: "list orgs",
  aliases: ["list organizations"],
  summary: "List every organization, newest first (admin key)",
  usage: "",
  description: "Example:\n  fount list orgs --json",
  async run(ctx) {
    const client = ctx.client();
    const [orgs, users] = await Promise.all([
      client.listAll<Org>("/v1/admin/orgs"),
      client.listAll<User>("/v1/admin/users"),
    ]);
    const owner = new Map(users.map((u) => [u.id, u.username]));
    ctx.output(orgs, () => {
      if (orgs.length === 0) return ctx.print("No organizations.");
      ctx.print(
        table(orgs, [
          { header: "ID", value: (o) => o.id },
          { header: "ORGNAME", value: (o) => o.orgname },
          { header: "NAME", value: (o) => o.name },
          { header: "OWNER", value: (o) => owner.get(o.owner_id) ?? o.owner_id },
          { header: "CREATED", value: (o) => formatTime(o.created_at) },
        ]),
      );
    });
  },
};

export const adminListCommands: Command[] = [listUsers, listOrgs];
