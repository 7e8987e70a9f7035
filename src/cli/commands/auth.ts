/** `fount login`, `logout`, `whoami`: the profile's server and key, and who the key belongs to. */
import { ApiClient } from "../client.ts";
import { CliError, type Command, type Context, defaultUrl, type Io, UsageError } from "../command.ts";
import { ConfigFile, configPath, defaultProfile, isValidProfileName } from "../config.ts";
import { fields, printable } from "../output.ts";

/** The shape of `GET /v1/users/me`'s `data`, as far as the CLI reads it. */
interface Me {
  id: string;
  username: string;
  email: string;
  orgs: Array<{ id: string; name: string; orgname: string; email: string }>;
  daily_invocations_quota?: number;
  daily_invocations_used?: number;
  daily_compute_time_quota?: number;
  daily_compute_time_used?: number;
  daily_stored_bytes_quota?: number;
  daily_stored_bytes_used?: number;
  billing_period_invocations?: number;
}

function profileName(ctx: Context): string {
  const name = ctx.globals.profile ?? (ctx.io.env.FOUNT_PROFILE || defaultProfile);
  if (!isValidProfileName(name))
    throw new UsageError(
      `Profile names are 1–64 letters, digits, '.', '_' or '-', not "${name}"`,
      ctx.command.name,
    );
  return name;
}

/** Reads one line from a terminal; `hidden` keeps a secret from being echoed. Prompts go to stderr. */
async function ask(io: Io, question: string, hidden = false): Promise<string> {
  const [{ createInterface }, { Writable }] = await Promise.all([
    import("node:readline/promises"),
    import("node:stream"),
  ]);
  let muted = false;
  const output = new Writable({
    write(chunk, _encoding, done) {
      if (!muted) io.stderr.write(String(chunk));
      done();
    },
  });
  const rl = createInterface({ input: io.stdin, output, terminal: true });
  const abort = new AbortController();
  rl.on("SIGINT", () => abort.abort());
  try {
    const answer = rl.question(question, { signal: abort.signal });
    // question() has written the prompt by now; from here on, typed characters are not echoed.
    muted = hidden;
    const text = await answer;
    if (hidden) io.stderr.write("\n");
    return text.trim();
  } finally {
    rl.close();
  }
}

const login: Command = {
  name: "login",
  summary: "Save a server URL and API key in a profile, after checking them",
  usage: "[--url <url>] [--api-key <key>] [--org <o_…>] [-p <profile>]",
  description: [
    "On a terminal, asks for what the flags (or FOUNT_URL, FOUNT_API_KEY) do not give; elsewhere, pass",
    "--api-key. The key is checked with GET /v1/users/me before it is saved. Without -p, the top-level",
    "(default) profile is written.",
    "",
    "Examples:",
    "  fount login",
    "  fount login --url https://fount.example.com --api-key fnt_… -p work",
  ].join("\n"),
  async run(ctx) {
    const env = ctx.io.env;
    const name = profileName(ctx);
    const file = ConfigFile.read(configPath(env));
    const existing = file.profile(name);
    let url = ctx.globals.url ?? (env.FOUNT_URL || undefined);
    let apiKey = ctx.globals.apiKey ?? (env.FOUNT_API_KEY || undefined);
    const interactive = Boolean(ctx.io.stdin.isTTY && ctx.io.stderr.isTTY);
    if (!apiKey && !interactive)
      throw new UsageError("Pass --api-key <key> (and --url <url>) when not on a terminal", "login");
    if (!url) {
      const fallback = existing?.url ?? defaultUrl;
      url =
        (interactive && !ctx.globals.apiKey ? await ask(ctx.io, `Server URL [${fallback}]: `) : "") ||
        fallback;
    }
    if (!apiKey) apiKey = await ask(ctx.io, "API key: ", true);
    if (!apiKey) throw new UsageError("An API key is needed", "login");

    const client = new ApiClient({ url, apiKey, userAgent: `fount-cli/${ctx.version}` });
    const me = (await client.get<{ data: Me }>("/v1/users/me")).data;
    let orgId = ctx.globals.org ?? existing?.org_id;
    if (orgId && !me.orgs.some((o) => o.id === orgId)) {
      if (ctx.globals.org)
        throw new CliError(`${me.username} is not a member of organization ${orgId}`, "not_found");
      ctx.note(printable(`Dropping org_id ${orgId} from the profile: ${me.username} is not a member of it.`));
      orgId = undefined;
    }
    file.set(name, { url: client.url, api_key: apiKey, org_id: orgId });
    file.write();
    ctx.output({ profile: name, config: file.path, url: client.url, org_id: orgId ?? null, user: me }, () => {
      ctx.print(printable(`Logged in to ${client.url} as ${me.username} (${me.id}).`));
      ctx.print(`Saved as profile "${name}" in ${file.path}.`);
    });
  },
};

const logout: Command = {
  name: "logout",
  summary: "Remove the API key from a profile",
  usage: "[-p <profile>]",
  description:
    "The profile's URL stays, as the default of the next login.\n\nExample:\n  fount logout -p work",
  async run(ctx) {
    const name = profileName(ctx);
    const file = ConfigFile.read(configPath(ctx.io.env));
    const had = file.profile(name)?.api_key !== undefined;
    if (had) {
      file.set(name, { api_key: undefined });
      file.write();
    }
    ctx.output({ profile: name, config: file.path, logged_out: had }, () => {
      ctx.print(
        had ? `Logged out: removed the API key of profile "${name}".` : `Profile "${name}" holds no API key.`,
      );
    });
  },
};

const whoami: Command = {
  name: "whoami",
  summary: "Show the user the API key belongs to, its organizations and quota",
  usage: "",
  description: "Example:\n  fount whoami -p work",
  async run(ctx) {
    const settings = ctx.settings();
    const client = ctx.client();
    const me = (await client.get<{ data: Me }>("/v1/users/me")).data;
    ctx.output(me, () => {
      const rows: Array<[string, unknown]> = [
        ["User", `${me.username} (${me.id})`],
        ["Email", me.email],
        ["Server", client.url],
        ["Profile", `${settings.profileName}${settings.profile ? "" : " (not in the config file)"}`],
        ["Orgs", me.orgs.map((o) => `${o.orgname} (${o.id})`).join(", ") || "none"],
      ];
      if (client.orgId) rows.push(["Acting for", client.orgId]);
      if (me.daily_invocations_quota !== undefined) {
        rows.push([
          "Invocations",
          `${me.daily_invocations_used ?? 0} of ${me.daily_invocations_quota} today`,
        ]);
        rows.push([
          "Compute",
          `${Math.round((me.daily_compute_time_used ?? 0) / 1000)} s of ${Math.round((me.daily_compute_time_quota ?? 0) / 1000)} s today`,
        ]);
        // A server before the stored-bytes quota answers without it.
        if (me.daily_stored_bytes_quota !== undefined) {
          const mib = (bytes: number) => (bytes / (1024 * 1024)).toFixed(1);
          rows.push([
            "Stored",
            `${mib(me.daily_stored_bytes_used ?? 0)} MiB of ${mib(me.daily_stored_bytes_quota)} MiB today`,
          ]);
        }
      } else if (me.billing_period_invocations !== undefined) {
        rows.push(["Invocations", `${me.billing_period_invocations} this billing period`]);
      }
      ctx.print(fields(rows));
    });
  },
};

export const authCommands: Command[] = [login, logout, whoami];
