/**
 * The `fount` command line: finds the command in the registry, parses its options, runs it, and turns
 * failures into messages and exit codes — 0 success, 1 failure (`fount: <message> (<code>)` on stderr),
 * 2 usage error (with a hint to the help), 130 interrupted.
 */
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { atLeast, runOnBundledNode } from "../../bin/node-runtime.mjs";
import {
  CliError,
  type Command,
  Context,
  type FlagValue,
  type Globals,
  type Io,
  type OptionSpec,
  UsageError,
} from "./command.ts";
import { commands as registry, groups as registryGroups } from "./commands/index.ts";
import { failureText, printable } from "./output.ts";
import { painterFor } from "./terminal.ts";
import { readVersion } from "./version.ts";

/** Options every command takes, before or after its name. */
export const globalOptions: Record<string, OptionSpec> = {
  profile: { type: "string", short: "p", value: "name", description: "Profile of the config file to use" },
  url: {
    type: "string",
    value: "url",
    description: "Server URL (else FOUNT_URL, the profile, http://127.0.0.1:8787)",
  },
  "api-key": { type: "string", value: "key", description: "API key (else FOUNT_API_KEY, the profile)" },
  org: {
    type: "string",
    value: "o_…",
    description: "Act for this organization (else FOUNT_ORG_ID, the profile)",
  },
  json: { type: "boolean", description: "Print machine-readable JSON" },
  help: { type: "boolean", short: "h", description: "Show help" },
  version: { type: "boolean", description: "Print the version" },
};

export function processIo(): Io {
  return { stdout: process.stdout, stderr: process.stderr, stdin: process.stdin, env: process.env };
}

interface Entry {
  words: string[];
  command: Command;
}

/** The registry indexed by words, checked once: unique names, no option shadowing a global one. */
export class Registry {
  readonly commands: Command[];
  readonly groups: Record<string, string>;
  readonly #entries: Entry[];

  constructor(commands: Command[], groups: Record<string, string>) {
    this.commands = commands;
    this.groups = groups;
    this.#entries = [];
    const seen = new Set<string>();
    for (const command of commands) {
      for (const name of [command.name, ...(command.aliases ?? [])]) {
        if (seen.has(name)) throw new Error(`Two commands are named "${name}"`);
        seen.add(name);
        this.#entries.push({ words: name.split(" "), command });
      }
      for (const [option, spec] of Object.entries(command.options ?? {})) {
        const clash = Object.entries(globalOptions).find(
          ([g, gs]) => g === option || (spec.short !== undefined && gs.short === spec.short),
        );
        if (clash)
          throw new Error(`Option --${option} of "${command.name}" clashes with the global --${clash[0]}`);
      }
    }
    // Longest names first, so that "list sources" wins over a plain "list".
    this.#entries.sort((a, b) => b.words.length - a.words.length);
  }

  /** The command named by the first words, and how many words its name took. */
  find(words: string[]): { command: Command; length: number } | undefined {
    const entry = this.#entries.find((e) => e.words.every((w, i) => words[i] === w));
    return entry ? { command: entry.command, length: entry.words.length } : undefined;
  }

  /** Commands whose name starts with `group` and another word. */
  inGroup(group: string): Command[] {
    return this.commands.filter((c) => c.name.startsWith(`${group} `));
  }

  isGroup(word: string): boolean {
    return word in this.groups || this.inGroup(word).length > 0;
  }

  /** Every option any command knows, so that a first pass finds the command words whatever flags precede them. */
  allOptions(): Record<string, OptionSpec> {
    const out: Record<string, OptionSpec> = {};
    for (const command of this.commands)
      for (const [k, v] of Object.entries(command.options ?? {})) out[k] ??= v;
    return { ...out, ...globalOptions };
  }
}

function parseConfig(options: Record<string, OptionSpec>) {
  return Object.fromEntries(
    Object.entries(options).map(([name, o]) => [
      name,
      { type: o.type, ...(o.short ? { short: o.short } : {}), ...(o.multiple ? { multiple: true } : {}) },
    ]),
  );
}

function flagLabel(name: string, o: OptionSpec): string {
  return `${o.short ? `-${o.short}, ` : "    "}--${name}${o.type === "string" ? ` <${o.value ?? "value"}>` : ""}`;
}

/** Help lines of options; `width` aligns several lists alike. */
function optionLines(options: Record<string, OptionSpec>, width = labelWidth(options)): string[] {
  return Object.entries(options).map(
    ([name, o]) => `  ${flagLabel(name, o).padEnd(width)}  ${o.description}`,
  );
}

function labelWidth(...lists: Array<Record<string, OptionSpec> | undefined>): number {
  return Math.max(
    0,
    ...lists.flatMap((l) => Object.entries(l ?? {}).map(([name, o]) => flagLabel(name, o).length)),
  );
}

function commandHelp(command: Command): string {
  const lines = [
    `Usage: fount ${command.name}${command.usage ? ` ${command.usage}` : ""}`,
    "",
    command.summary,
  ];
  if (command.aliases?.length) lines.push("", `Also: ${command.aliases.map((a) => `fount ${a}`).join(", ")}`);
  const width = labelWidth(command.options, globalOptions);
  if (command.options && Object.keys(command.options).length > 0)
    lines.push("", "Options:", ...optionLines(command.options, width));
  lines.push("", "Global options:", ...optionLines(globalOptions, width));
  if (command.description) lines.push("", command.description);
  return lines.join("\n");
}

function commandList(commands: Command[]): string[] {
  const width = Math.max(...commands.map((c) => c.name.length));
  return commands.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`);
}

function groupHelp(registry: Registry, group: string): string {
  const members = registry.inGroup(group);
  return [
    `Usage: fount ${group} <command> [options]`,
    "",
    registry.groups[group] ?? "",
    "",
    "Commands:",
    ...commandList(members),
    "",
    `Run \`fount ${group} <command> --help\` for a command's options.`,
  ].join("\n");
}

function topHelp(registry: Registry): string {
  const admin = registry.inGroup("admin");
  const others = registry.commands
    .filter((c) => !admin.includes(c))
    .sort((a, b) => a.name.localeCompare(b.name));
  return [
    "fount: the command line of Fount, self-hosted event sources with Pipedream's API",
    "",
    "Usage: fount <command> [arguments] [options]",
    "",
    "Commands:",
    ...commandList([
      ...others,
      { name: "help", summary: "Show help for a command", usage: "", run: async () => {} },
    ]),
    "",
    "Server administration (on the server host, with the server's FOUNT_DATA_DIR / DATABASE_URL):",
    ...commandList(admin),
    "",
    "Global options:",
    ...optionLines(globalOptions),
    "",
    "Run `fount help <command>` or `fount <command> --help` for a command's options; docs/cli.md has examples.",
  ].join("\n");
}

function toUsageError(err: unknown, command: string | undefined): never {
  const e = err as Error & { code?: string };
  if (typeof e.code === "string" && e.code.startsWith("ERR_PARSE_ARGS")) {
    // Node's messages go on to explain `--`; the first sentence is what the user needs.
    throw new UsageError(e.message.split(/\.\s/)[0]!.replace(/\.$/, ""), command);
  }
  throw err;
}

/** Runs one command line; resolves to the exit code. Never calls process.exit. */
export async function main(
  argv: string[],
  io: Io = processIo(),
  commands = registry,
  groups = registryGroups,
): Promise<number> {
  const reg = new Registry(commands, groups);
  try {
    return await dispatch(reg, argv, io);
  } catch (err) {
    return report(err, io);
  }
}

async function dispatch(reg: Registry, argv: string[], io: Io): Promise<number> {
  const version = readVersion();
  let first: ReturnType<typeof parseArgs>;
  try {
    first = parseArgs({
      args: argv,
      options: parseConfig(reg.allOptions()),
      strict: false,
      allowPositionals: true,
    });
  } catch (err) {
    toUsageError(err, undefined);
  }
  const words = first.positionals;
  const wantsHelp = first.values.help === true;
  if (first.values.version === true) {
    io.stdout.write(`fount ${version}\n`);
    return 0;
  }

  if (words[0] === "help" || words.length === 0) {
    const target = words[0] === "help" ? words.slice(1) : [];
    const found = reg.find(target);
    if (target.length === 0) io.stdout.write(`${topHelp(reg)}\n`);
    else if (found && found.length === target.length) io.stdout.write(`${commandHelp(found.command)}\n`);
    else if (target.length === 1 && reg.isGroup(target[0]!))
      io.stdout.write(`${groupHelp(reg, target[0]!)}\n`);
    else throw new UsageError(`Unknown command "${target.join(" ")}"`);
    return 0;
  }

  const found = reg.find(words);
  if (!found) {
    const group = words[0]!;
    if (!reg.isGroup(group)) throw new UsageError(`Unknown command "${group}"`);
    if (words.length === 1) {
      if (wantsHelp) {
        io.stdout.write(`${groupHelp(reg, group)}\n`);
        return 0;
      }
      io.stderr.write(`fount: ${group} needs a command\n\n${groupHelp(reg, group)}\n`);
      return 2;
    }
    throw new UsageError(`Unknown command "${group} ${words[1]}"`, group);
  }

  const { command, length } = found;
  if (wantsHelp) {
    io.stdout.write(`${commandHelp(command)}\n`);
    return 0;
  }
  let parsed: { values: Record<string, FlagValue>; positionals: string[] };
  try {
    parsed = parseArgs({
      args: argv,
      options: parseConfig({ ...globalOptions, ...command.options }),
      strict: true,
      allowPositionals: true,
    }) as typeof parsed;
  } catch (err) {
    toUsageError(err, command.name);
  }
  if (command.name.startsWith("admin ") && !atLeast(process.version)) return handOver(argv);
  const args = parsed.positionals.slice(length);
  const min = command.args?.min ?? 0;
  const max = command.args?.max ?? 0;
  if (args.length < min)
    throw new UsageError(`Missing arguments: fount ${command.name} ${command.usage}`, command.name);
  if (args.length > max)
    throw new UsageError(
      `Unexpected argument "${args[max]}": fount ${command.name} ${command.usage}`.trimEnd(),
      command.name,
    );

  const v = parsed.values;
  const str = (value: FlagValue) => (typeof value === "string" ? value : undefined);
  const globals: Globals = {
    profile: str(v.profile),
    url: str(v.url),
    apiKey: str(v["api-key"]),
    org: str(v.org),
    json: v.json === true,
  };
  const ctx = new Context({ command, args, flags: v, globals, io, version });
  const code = await command.run(ctx);
  return typeof code === "number" ? code : 0;
}

/**
 * Runs the command line again on the Node that `npm ci` installed: the admin commands open the store
 * with node:sqlite and load the server's TypeScript modules, which this older Node cannot.
 */
async function handOver(argv: string[]): Promise<number> {
  try {
    return await runOnBundledNode(fileURLToPath(new URL("../../bin/fount.mjs", import.meta.url)), argv);
  } catch (err) {
    const e = err as Error & { code?: string };
    throw new CliError(e.message, e.code);
  }
}

/** Prints a failure the one way the CLI does and picks its exit code. */
function report(err: unknown, io: Io): number {
  const e = err instanceof Error ? err : new Error(String(err));
  const fount = painterFor(io.stderr, io.env)("red", "fount:");
  // A message may quote what the server or the user gave (a name, an argument): shown, never obeyed.
  const message = printable(e.message, { lines: true });
  if (e instanceof UsageError) {
    const help = e.command ? `fount ${e.command} --help` : "fount help";
    io.stderr.write(`${fount} ${message}\nRun \`${help}\` for usage.\n`);
    return 2;
  }
  if (e instanceof CliError) {
    io.stderr.write(`${fount} ${message}\n`);
    return e.exitCode;
  }
  if (e.name === "AbortError") {
    io.stderr.write("fount: interrupted\n");
    return 130;
  }
  // ApiError from the server, AppError from the domain (admin commands), system errors (EACCES…).
  io.stderr.write(`${fount} ${failureText(e)}\n`);
  if (io.env.FOUNT_DEBUG && e.stack) io.stderr.write(`${printable(e.stack, { lines: true })}\n`);
  return 1;
}
