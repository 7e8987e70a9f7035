/**
 * What a CLI command is and what it gets when it runs. Each command is a plain object (name, summary,
 * usage, options, run) in a file under `commands/`, listed once in `commands/index.ts`.
 */
import { ApiClient } from "./client.ts";
import { ConfigFile, configPath, defaultProfile, type Profile } from "./config.ts";
import { formatJson, printable } from "./output.ts";
import { askLine, type Painter, painterFor, plain, withProgress } from "./terminal.ts";

/** One option of a command, in `util.parseArgs` terms plus its help text. */
export interface OptionSpec {
  type: "string" | "boolean";
  short?: string;
  multiple?: boolean;
  /** Help text. */
  description: string;
  /** Placeholder of the value in help, e.g. `<name>`. */
  value?: string;
}

/** A command of the registry. */
export interface Command {
  /** The words that invoke it: `whoami`, `webhook create`, `admin create-user`. */
  name: string;
  /** Other word sequences that invoke it (e.g. `list so`). */
  aliases?: string[];
  /** One line for the command list. */
  summary: string;
  /** Arguments and options after the name, for the usage line: `<url> [--name <name>]`. */
  usage: string;
  /** Further help: details and examples, printed under the options. */
  description?: string;
  options?: Record<string, OptionSpec>;
  /** Bounds on the number of positional arguments (default: none allowed). */
  args?: { min?: number; max?: number };
  /** Runs the command; a returned number is the exit code (default 0). */
  run(ctx: Context): Promise<number | undefined>;
}

/** The streams and environment a run uses; `process`'s by default, replaceable in tests. */
export interface Io {
  stdout: { write(text: string): unknown; isTTY?: boolean };
  stderr: { write(text: string): unknown; isTTY?: boolean };
  stdin: NodeJS.ReadableStream & { isTTY?: boolean; setRawMode?: (mode: boolean) => unknown };
  env: NodeJS.ProcessEnv;
}

/** Options every command takes. */
export interface Globals {
  profile: string | undefined;
  url: string | undefined;
  apiKey: string | undefined;
  org: string | undefined;
  json: boolean;
}

export type FlagValue = string | boolean | Array<string | boolean> | undefined;

/** A mistake in how the command was called: exit code 2 and a hint to the help. */
export class UsageError extends Error {
  /** The command whose help the hint names; undefined for the top-level help. */
  readonly command: string | undefined;

  constructor(message: string, command?: string) {
    super(message);
    this.name = "UsageError";
    this.command = command;
  }
}

/** A failure found by the CLI itself (not logged in, no such profile…): exit code 1 unless told. */
export class CliError extends Error {
  readonly code: string | undefined;
  readonly exitCode: number;

  constructor(message: string, code?: string, exitCode = 1) {
    super(message);
    this.name = "CliError";
    this.code = code;
    this.exitCode = exitCode;
  }
}

/** Where the server and key come from, after flags, environment and the config file. */
export interface Settings {
  configPath: string;
  /** The profile name (`default` for the top-level keys). */
  profileName: string;
  /** Whether `-p` or FOUNT_PROFILE named it. */
  profileExplicit: boolean;
  /** The profile's keys; undefined when the file has no such profile. */
  profile: Profile | undefined;
  url: string;
  apiKey: string | undefined;
  orgId: string | undefined;
}

/** Server used when neither a flag, the environment nor the profile names one: `npm start`'s default. */
export const defaultUrl = "http://127.0.0.1:8787";

export class Context {
  readonly command: Command;
  /** Positional arguments after the command's words. */
  readonly args: string[];
  readonly flags: Record<string, FlagValue>;
  readonly globals: Globals;
  readonly io: Io;
  readonly version: string;

  constructor(init: {
    command: Command;
    args: string[];
    flags: Record<string, FlagValue>;
    globals: Globals;
    io: Io;
    version: string;
  }) {
    this.command = init.command;
    this.args = init.args;
    this.flags = init.flags;
    this.globals = init.globals;
    this.io = init.io;
    this.version = init.version;
  }

  get json(): boolean {
    return this.globals.json;
  }

  /** Colours for stdout: none off a terminal, with NO_COLOR, or under --json. */
  get paint(): Painter {
    return this.json ? plain : painterFor(this.io.stdout, this.io.env);
  }

  /** Colours for stderr. */
  get paintErr(): Painter {
    return painterFor(this.io.stderr, this.io.env);
  }

  /** Whether a person can answer: stdin and stderr are a terminal (prompts go to stderr). */
  get interactive(): boolean {
    return this.io.stdin.isTTY === true && this.io.stderr.isTTY === true;
  }

  /** Asks a yes/no question on the terminal; only `y` or `yes` is a yes. It may name what the server named. */
  async confirm(question: string): Promise<boolean> {
    const answer = await askLine(this.io.stdin, this.io.stderr, `${printable(question)} [y/N] `);
    return /^\s*y(es)?\s*$/i.test(answer ?? "");
  }

  /**
   * Whether to go on deleting `what`: yes with `--yes`; on a terminal, what the person answers to
   * `question` (a no is noted); elsewhere an error (exit 2) asking for `--yes`.
   */
  async confirmDelete(what: string, question: string): Promise<boolean> {
    if (this.boolean("yes")) return true;
    if (!this.interactive)
      throw new CliError(
        `Not deleting ${what}: pass --yes to delete without a terminal to confirm on`,
        "confirmation_required",
        2,
      );
    if (await this.confirm(question)) return true;
    this.note("Nothing deleted.");
    return false;
  }

  /** Runs `work` while stderr shows `label`: a spinner on a terminal, one plain line elsewhere. */
  progress<T>(label: string, work: () => Promise<T>): Promise<T> {
    return withProgress(this.io.stderr, label, this.paintErr, work);
  }

  /** A line (or lines) on stdout. */
  print(text = ""): void {
    this.io.stdout.write(`${text}\n`);
  }

  /** A note on stderr: progress and hints that scripts reading stdout should not see. */
  note(text: string): void {
    this.io.stderr.write(`${text}\n`);
  }

  /** Under `--json`, prints `data` as JSON; otherwise runs `human`, which prints for people. */
  output(data: unknown, human: () => void): void {
    if (this.json) this.print(formatJson(data));
    else human();
  }

  /** A string option, or undefined. */
  string(name: string): string | undefined {
    const value = this.flags[name];
    return typeof value === "string" ? value : undefined;
  }

  /** A string option that must be there. */
  requireString(name: string): string {
    const value = this.string(name);
    if (value === undefined || value === "")
      throw new UsageError(
        `Missing --${name} <${this.command.options?.[name]?.value ?? "value"}>`,
        this.command.name,
      );
    return value;
  }

  /** A string option restricted to some values. */
  choice<T extends string>(name: string, allowed: readonly T[]): T | undefined {
    const value = this.string(name);
    if (value === undefined) return undefined;
    if (!(allowed as readonly string[]).includes(value))
      throw new UsageError(
        `--${name} must be one of ${allowed.join(", ")}, not "${value}"`,
        this.command.name,
      );
    return value as T;
  }

  boolean(name: string): boolean {
    return this.flags[name] === true;
  }

  /** The positional argument at `index`; `label` names it in the error when it is missing. */
  arg(index: number, label: string): string {
    const value = this.args[index];
    if (value === undefined || value === "") throw new UsageError(`Missing ${label}`, this.command.name);
    return value;
  }

  /** The config file, its selected profile, and the server URL, key and organization in effect. */
  settings(): Settings {
    const env = this.io.env;
    const file = ConfigFile.read(configPath(env));
    const named = this.globals.profile ?? (env.FOUNT_PROFILE || undefined);
    const profileName = named ?? defaultProfile;
    const profile = file.profile(profileName);
    // An explicitly chosen profile beats the environment; the default profile does not.
    const fromProfile = named !== undefined;
    const pick = (flag: string | undefined, envValue: string | undefined, profileValue: string | undefined) =>
      flag ?? (fromProfile ? (profileValue ?? envValue) : (envValue ?? profileValue));
    return {
      configPath: file.path,
      profileName,
      profileExplicit: named !== undefined,
      profile,
      url: pick(this.globals.url, env.FOUNT_URL || undefined, profile?.url) ?? defaultUrl,
      apiKey: pick(this.globals.apiKey, env.FOUNT_API_KEY || undefined, profile?.api_key),
      orgId: pick(this.globals.org, env.FOUNT_ORG_ID || undefined, profile?.org_id),
    };
  }

  /** An API client for the settings in effect; fails with a hint when no key is known. */
  client(): ApiClient {
    const s = this.settings();
    if (s.profileExplicit && !s.profile && this.globals.apiKey === undefined) {
      throw new CliError(
        `No profile "${s.profileName}" in ${s.configPath}; run \`fount login -p ${s.profileName}\` first`,
      );
    }
    if (!s.apiKey) {
      throw new CliError(
        "No API key: run `fount login`, or pass --api-key or set FOUNT_API_KEY",
        "not_logged_in",
      );
    }
    return new ApiClient({
      url: s.url,
      apiKey: s.apiKey,
      orgId: s.orgId,
      userAgent: `fount-cli/${this.version}`,
    });
  }
}
