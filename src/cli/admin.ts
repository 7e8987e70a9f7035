/**
 * `fount admin …`: account administration on the server's own store, for an operator on the server
 * host, without an API key. The store is found from the same environment as the server (FOUNT_DATA_DIR,
 * DATABASE_URL); the SQLite store may stay open in the running server meanwhile (WAL, busy timeout).
 * The server modules load only when an admin command runs, so that client commands start fast.
 */
import { existsSync } from "node:fs";
import path from "node:path";
import type { Accounts } from "../domain/accounts/accounts.ts";
import type { Org, User } from "../domain/types.ts";
import type { Storage } from "../storage/port.ts";
import { backup, restore } from "./backup.ts";
import { CliError, type Command, type Context } from "./command.ts";
import { fields, formatTime, table } from "./output.ts";
import { serverConfig } from "./server-config.ts";

interface Admin {
  store: Storage;
  accounts: Accounts;
  renderUser: (u: User) => Record<string, unknown>;
  renderOrg: (o: Org) => Record<string, unknown>;
}

/** Opens the store the server uses, runs `fn`, and closes the store whatever happens. */
async function withStore<T>(ctx: Context, fn: (admin: Admin) => Promise<T>): Promise<T> {
  const config = await serverConfig(ctx);
  if (!config.databaseUrl) {
    // Opening would create an empty store, and a user created there would stop the server's first-start
    // bootstrap from making the admin: almost surely the wrong directory.
    const file = path.join(config.dataDir, "fount.db");
    if (!existsSync(file)) {
      throw new CliError(
        `No Fount store at ${file}: set FOUNT_DATA_DIR (or DATABASE_URL) as for the server, or start the server once to create it`,
        "no_store",
      );
    }
  }
  const [{ openStorage }, { Accounts }, { systemClock }, { renderOrg, renderUser }, { tellStale }] =
    await Promise.all([
      import("../storage/open.ts"),
      import("../domain/accounts/accounts.ts"),
      import("../clock.ts"),
      import("../http/admin-views.ts"),
      import("../domain/cluster/cluster-channel.ts"),
    ]);
  // A PostgreSQL schema without a store is refused too: a mistyped DATABASE_URL must not get one.
  const store = await openStorage(config, { existingOnly: true });
  // The running nodes cache keys and memberships (for at most a moment, storage/postgres/row-cache.ts):
  // they are told of these changes at once, as of a node's. (SQLite's server sees the file change.)
  const told: Array<Promise<void>> = [];
  const { cluster } = store;
  cluster?.onStale((kinds) => told.push(tellStale(cluster, "fount-admin", kinds)));
  try {
    return await fn({ store, accounts: new Accounts(store, systemClock), renderUser, renderOrg });
  } finally {
    // A notice that failed leaves the nodes to see the change when their cached rows expire.
    await Promise.allSettled(told);
    await store.close();
  }
}

/** Same code and message shape as the API's errors, so that both print alike. */
function notFound(message: string): Error {
  return Object.assign(new Error(message), { name: "AppError", code: "not_found" });
}

function invalidParameter(message: string): Error {
  return Object.assign(new Error(message), { name: "AppError", code: "invalid_parameter" });
}

/** A user by `u_…` ID or username, as pd takes an ID or a name. */
async function resolveUser(store: Storage, ref: string): Promise<User> {
  const user = /^u_[A-Za-z0-9]+$/.test(ref) ? await store.getUser(ref) : await store.getUserByUsername(ref);
  if (!user) throw notFound(`User ${ref} not found`);
  return user;
}

async function resolveOrg(store: Storage, ref: string): Promise<Org> {
  const org = /^o_[A-Za-z0-9]+$/.test(ref) ? await store.getOrg(ref) : await store.getOrgByName(ref);
  if (!org) throw notFound(`Organization ${ref} not found`);
  return org;
}

// The API validates emails with JSON Schema's `format: email`; this catches the same typos.
const emailPattern = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

const createUser: Command = {
  name: "admin create-user",
  summary: "Create a user and its first API key (shown once)",
  usage: "--username <name> --email <email> [--plan free|paid] [--admin]",
  options: {
    username: { type: "string", value: "name", description: "Login name: letters, digits, . _ -" },
    email: { type: "string", value: "email", description: "Email address" },
    plan: { type: "string", value: "free|paid", description: "Plan (default free: daily quotas apply)" },
    admin: { type: "boolean", description: "Make the user an admin (may use the admin API)" },
  },
  description: "Example:\n  fount admin create-user --username ada --email ada@example.com --plan paid",
  async run(ctx) {
    const username = ctx.requireString("username");
    const email = ctx.requireString("email");
    const plan = ctx.choice("plan", ["free", "paid"] as const);
    if (!emailPattern.test(email)) throw invalidParameter(`email must be an email address, not "${email}"`);
    await withStore(ctx, async ({ accounts, renderUser }) => {
      const { user, apiKey } = await accounts.createUser({
        username,
        email,
        plan,
        isAdmin: ctx.boolean("admin"),
      });
      ctx.output({ ...renderUser(user), api_key: apiKey.secret, api_key_id: apiKey.key.id }, () => {
        ctx.print(
          `Created user ${user.username} (${user.id}), plan ${user.plan}${user.isAdmin ? ", admin" : ""}.`,
        );
        ctx.print(`Its API key (${apiKey.key.id}), shown only this once:`);
        ctx.print(`  ${apiKey.secret}`);
      });
    });
  },
};

const createOrg: Command = {
  name: "admin create-org",
  summary: "Create an organization owned by a user",
  usage: "--orgname <name> --owner <u_…|username> [--name <display name>] [--email <email>]",
  options: {
    orgname: { type: "string", value: "name", description: "Short name: letters, digits, . _ -" },
    owner: { type: "string", value: "u_…|username", description: "The owner, who becomes its first member" },
    name: { type: "string", value: "text", description: "Display name (default: the orgname)" },
    email: { type: "string", value: "email", description: "Contact email (default: the owner's)" },
  },
  description: "Example:\n  fount admin create-org --orgname acme --owner ada --name 'Acme Inc.'",
  async run(ctx) {
    const orgname = ctx.requireString("orgname");
    const ownerRef = ctx.requireString("owner");
    const email = ctx.string("email");
    if (email !== undefined && !emailPattern.test(email))
      throw invalidParameter(`email must be an email address, not "${email}"`);
    await withStore(ctx, async ({ store, accounts, renderOrg }) => {
      const owner = await resolveUser(store, ownerRef);
      const org = await accounts.createOrg({ orgname, name: ctx.string("name"), email, ownerId: owner.id });
      ctx.output(renderOrg(org), () => {
        ctx.print(
          `Created organization ${org.orgname} (${org.id}), owned by ${owner.username} (${owner.id}).`,
        );
      });
    });
  },
};

const addMember: Command = {
  name: "admin add-member",
  summary: "Add a user to an organization",
  usage: "<o_…|orgname> <u_…|username>",
  args: { min: 2, max: 2 },
  description: "Adding a member twice is not an error.\n\nExample:\n  fount admin add-member acme grace",
  async run(ctx) {
    const orgRef = ctx.arg(0, "<o_…|orgname>");
    const userRef = ctx.arg(1, "<u_…|username>");
    await withStore(ctx, async ({ store, accounts }) => {
      const org = await resolveOrg(store, orgRef);
      const user = await resolveUser(store, userRef);
      await accounts.addMember(org.id, user.id);
      ctx.output({ org_id: org.id, user_id: user.id, role: "member" }, () => {
        ctx.print(`${user.username} (${user.id}) is a member of ${org.orgname} (${org.id}).`);
      });
    });
  },
};

const removeMember: Command = {
  name: "admin remove-member",
  summary: "Remove a user from an organization",
  usage: "<o_…|orgname> <u_…|username>",
  args: { min: 2, max: 2 },
  description: "The owner cannot be removed.\n\nExample:\n  fount admin remove-member acme grace",
  async run(ctx) {
    const orgRef = ctx.arg(0, "<o_…|orgname>");
    const userRef = ctx.arg(1, "<u_…|username>");
    await withStore(ctx, async ({ store, accounts }) => {
      const org = await resolveOrg(store, orgRef);
      const user = await resolveUser(store, userRef);
      await accounts.removeMember(org.id, user.id);
      ctx.output({ org_id: org.id, user_id: user.id }, () => {
        ctx.print(`Removed ${user.username} (${user.id}) from ${org.orgname} (${org.id}).`);
      });
    });
  },
};

const createKey: Command = {
  name: "admin create-key",
  summary: "Create another API key for a user (shown once)",
  usage: "<u_…|username> [--name <name>]",
  args: { min: 1, max: 1 },
  options: {
    name: { type: "string", value: "name", description: "A name to tell keys apart (default: default)" },
  },
  description: "Example:\n  fount admin create-key ada --name ci",
  async run(ctx) {
    const userRef = ctx.arg(0, "<u_…|username>");
    await withStore(ctx, async ({ store, accounts }) => {
      const user = await resolveUser(store, userRef);
      const issued = await accounts.createApiKey(user.id, ctx.string("name"));
      const k = issued.key;
      ctx.output(
        {
          id: k.id,
          user_id: k.userId,
          name: k.name,
          prefix: k.prefix,
          created_at: k.createdAt,
          api_key: issued.secret,
        },
        () => {
          ctx.print(
            `Created API key ${k.id} ("${k.name}") for ${user.username} (${user.id}), shown only this once:`,
          );
          ctx.print(`  ${issued.secret}`);
        },
      );
    });
  },
};

const revokeKey: Command = {
  name: "admin revoke-key",
  summary: "Revoke an API key; requests with it get 401 from then on",
  usage: "<key_…>",
  args: { min: 1, max: 1 },
  description:
    "Key IDs are shown by `fount admin show-user`.\n\nExample:\n  fount admin revoke-key key_3kTmd9QeL2xA",
  async run(ctx) {
    const keyId = ctx.arg(0, "<key_…>");
    await withStore(ctx, async ({ accounts }) => {
      await accounts.revokeApiKey(keyId);
      ctx.output({ id: keyId, revoked: true }, () => ctx.print(`Revoked API key ${keyId}.`));
    });
  },
};

const showUser: Command = {
  name: "admin show-user",
  summary: "Show a user, its organizations and its API keys (never their secrets)",
  usage: "<u_…|username>",
  args: { min: 1, max: 1 },
  description: "Example:\n  fount admin show-user ada",
  async run(ctx) {
    const userRef = ctx.arg(0, "<u_…|username>");
    await withStore(ctx, async ({ store, renderUser, renderOrg }) => {
      const user = await resolveUser(store, userRef);
      const orgs = await store.listOrgsOfUser(user.id);
      const roles = await Promise.all(
        orgs.map(
          async (o) => (await store.listMembers(o.id)).find((m) => m.userId === user.id)?.role ?? "member",
        ),
      );
      const keys = (await store.listApiKeys(user.id)).map((k) => ({
        id: k.id,
        name: k.name,
        prefix: k.prefix,
        created_at: k.createdAt,
        revoked_at: k.revokedAt,
      }));
      const data = {
        ...renderUser(user),
        orgs: orgs.map((o, i) => ({ ...renderOrg(o), role: roles[i] })),
        api_keys: keys,
      };
      ctx.output(data, () => {
        ctx.print(
          fields([
            ["User", `${user.username} (${user.id})`],
            ["Email", user.email],
            ["Plan", user.plan],
            ["Admin", user.isAdmin ? "yes" : "no"],
            ["Created", formatTime(user.createdAt)],
            ["Orgs", orgs.map((o, i) => `${o.orgname} (${o.id}, ${roles[i]})`).join(", ") || "none"],
          ]),
        );
        ctx.print();
        ctx.print(
          table(keys, [
            { header: "KEY ID", value: (k) => k.id },
            { header: "NAME", value: (k) => k.name },
            { header: "PREFIX", value: (k) => `${k.prefix}…` },
            { header: "CREATED", value: (k) => formatTime(k.created_at) },
            { header: "REVOKED", value: (k) => formatTime(k.revoked_at) },
          ]),
        );
      });
    });
  },
};

/** "3.2 s", "4 min", "2 h": how long ago a heartbeat was. */
function ago(ms: number): string {
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s ago`;
  if (ms < 3_600_000) return `${Math.floor(ms / 60_000)} min ago`;
  return `${Math.floor(ms / 3_600_000)} h ago`;
}

const nodes: Command = {
  name: "admin nodes",
  summary: "List the nodes sharing the PostgreSQL store: alive or not, their address, the sources each runs",
  usage: "",
  description: `Each start of a node is listed apart (its FOUNT_NODE_ID and a suffix of its own). A node is live
while its heartbeat (every second) is at most 5 s old; one that was killed stays listed as dead for a day,
one that stopped cleanly leaves. SOURCES counts the sources whose run lease the node holds: their
invocations run there, and the other nodes send it those sources' endpoint hits (ADDRESS, from
FOUNT_NODE_URL or the address it listens on). The SQLite store runs one node and has no such list.
Example:
  DATABASE_URL=postgres://fount@db/fount fount admin nodes`,
  async run(ctx) {
    await withStore(ctx, async ({ store }) => {
      if (!store.cluster) {
        throw new CliError(
          "The SQLite store runs one node: several nodes share a PostgreSQL store (DATABASE_URL)",
          "not_clustered",
        );
      }
      const { nodeViews } = await import("../domain/cluster/source-leases.ts");
      const data = await nodeViews(store.cluster);
      ctx.output(data, () => {
        ctx.print(
          table(data, [
            { header: "NODE", value: (n) => n.id },
            { header: "STATE", value: (n) => n.state },
            { header: "ADDRESS", value: (n) => n.url ?? "-" },
            { header: "STARTED", value: (n) => formatTime(n.started_at) },
            { header: "HEARTBEAT", value: (n) => ago(n.heartbeat_age_ms) },
            { header: "SOURCES", value: (n) => String(n.sources) },
          ]),
        );
      });
    });
  },
};

/** The `admin` group. There is no `admin list-users`: the store port has no operation listing users. */
export const adminCommands: Command[] = [
  createUser,
  createOrg,
  addMember,
  removeMember,
  createKey,
  revokeKey,
  showUser,
  nodes,
  backup,
  restore,
];
