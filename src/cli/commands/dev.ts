/**
 * `fount dev <file>`, like `pd dev`: deploys a local file (or attaches to a deployed source with
 * `--dc`), watches it and every local file it imports, updates that same source on each save (its ID,
 * endpoint and `this.db` stay), and shows its events, logs and errors in one stream until Ctrl-C.
 */
import { stat } from "node:fs/promises";
import type { ApiClient } from "../client.ts";
import { CliError, type Command, type Context } from "../command.ts";
import { FileWatcher } from "../file-watch.ts";
import { failureText, formatJson, printable } from "../output.ts";
import { resolveSource } from "../resolve.ts";
import { parseProps } from "../source-input.ts";
import { type StreamEntry, untilInterrupted } from "../sse.ts";
import { follow, formatAnyEntry, newestOf, recent } from "./events.ts";
import {
  deployingLabel,
  describeSource,
  propOption,
  type Source,
  sourcePath,
  updateBody,
} from "./sources.ts";

/** The channels shown: emitted events, then console output and errors. */
const channels: Array<string | undefined> = [undefined, "$logs", "$errors"];

/** Loaded on use: esbuild is only needed by the commands that bundle. */
async function bundle(file: string) {
  const { bundleLocalFiles } = await import("../bundle.ts");
  return bundleLocalFiles(file);
}

/** Where the stream starts: a new source from its first entries (its deploy hook's), else from now. */
async function startIds(client: ApiClient, source: Source, attached: boolean) {
  const since = new Map<string | undefined, string>();
  for (const channel of channels) {
    const shown: StreamEntry[] = attached ? await recent(client, source.id, 1, channel) : [];
    since.set(channel, newestOf(shown));
  }
  return since;
}

/**
 * Rebuilds and updates the source when files change, one update at a time: changes made while one
 * runs are taken up by a single further pass. A failed build or update is printed, and watching goes on.
 */
class Reloader {
  readonly #ctx: Context;
  readonly #client: ApiClient;
  readonly #file: string;
  readonly #source: Source;
  readonly #given: Record<string, unknown>;
  readonly watcher: FileWatcher;
  #lastCode: string;
  #running: Promise<void> | undefined;
  #again = false;

  constructor(
    ctx: Context,
    client: ApiClient,
    file: string,
    source: Source,
    code: string,
    given: Record<string, unknown>,
  ) {
    this.#ctx = ctx;
    this.#client = client;
    this.#file = file;
    this.#source = source;
    this.#given = given;
    this.#lastCode = code;
    this.watcher = new FileWatcher((files) => this.changed(files));
  }

  changed(files: string[]): void {
    const paint = this.#ctx.paintErr;
    this.#ctx.note(paint("dim", printable(`Changed: ${files.map((f) => relative(f)).join(", ")}`)));
    if (this.#running) {
      this.#again = true;
      return;
    }
    this.#running = (async () => {
      do {
        this.#again = false;
        await this.#reload();
      } while (this.#again);
    })().finally(() => {
      this.#running = undefined;
    });
  }

  /** Resolves when no update is under way. */
  async settled(): Promise<void> {
    while (this.#running) await this.#running;
  }

  async #reload(): Promise<void> {
    const ctx = this.#ctx;
    const paint = ctx.paintErr;
    let built: Awaited<ReturnType<typeof bundle>>;
    try {
      built = await bundle(this.#file);
    } catch (err) {
      ctx.note(`${paint("red", "fount:")} ${failureText(err as Error)}`);
      ctx.note("Still watching; the source runs the last code that built.");
      return;
    }
    this.watcher.watch(built.inputs);
    if (built.code === this.#lastCode) {
      ctx.note(paint("dim", "No change in the bundle; nothing to update."));
      return;
    }
    const s = this.#source;
    try {
      const body = await updateBody(this.#client, s.id, { component_code: built.code }, this.#given);
      await ctx.progress(printable(`Updating ${s.name_slug}…`), () =>
        this.#client.put(sourcePath(s.id), body),
      );
      this.#lastCode = built.code;
      ctx.note(paint("green", printable(`Updated ${s.name_slug} (${s.id}).`)));
    } catch (err) {
      ctx.note(`${paint("red", "fount:")} ${failureText(err as Error)}`);
      ctx.note("Still watching; the source runs the last code that deployed.");
    }
  }
}

function relative(file: string): string {
  const cwd = process.cwd();
  return file.startsWith(`${cwd}/`) ? file.slice(cwd.length + 1) : file;
}

const dev: Command = {
  name: "dev",
  summary: "Deploy a local file, update the source on every save, show its events, logs and errors",
  usage: "<file> [--dc <dc_…|name>] [--name <name>] [--prop <name=value>]… [--delete]",
  args: { min: 1, max: 1 },
  options: {
    dc: {
      type: "string",
      value: "dc_…|name",
      description: "Attach to this deployed source (update it with the file) instead of deploying a new one",
    },
    name: { type: "string", value: "name", description: "Name of a new source (default: the component's)" },
    prop: propOption,
    delete: {
      type: "boolean",
      description: "Delete the source on exit (default: keep it, as pd dev does, to re-attach with --dc)",
    },
  },
  description: [
    "The file is bundled with the local files it imports, as `fount deploy` does, and deployed; then it",
    "and every one of those files are watched. Each save rebuilds the bundle and updates the same source",
    "(deactivate hook, swap, activate hook): its ID, endpoint, props and this.db stay. A file that does",
    "not build, or code the server refuses, is reported and watching goes on with the last good code.",
    "",
    "Events, $logs and $errors of the source print as they come (stdout; --json: one entry per line);",
    "status lines go to stderr. Ctrl-C stops; the source stays deployed unless --delete.",
    "",
    "Examples:",
    "  fount dev sources/new-order/new-order.mjs --prop acme=apn_Bfu9c2mawR08",
    "  fount dev --dc dc_DHuyfccLqAW4 sources/new-order/new-order.mjs",
    "  fount dev scratch.mjs --delete",
  ].join("\n"),
  async run(ctx) {
    const file = ctx.arg(0, "<file>");
    const isFile = await stat(file).then(
      (s) => s.isFile(),
      () => false,
    );
    if (!isFile) throw new CliError(`No file ${file}`, "file_not_found");
    const client = ctx.client();
    const attach = ctx.string("dc");
    const first = await bundle(file);
    const component = { component_code: first.code };
    const given = parseProps(ctx.flags.prop, ctx.command.name);
    let source: Source;
    if (attach !== undefined) {
      const target = (await resolveSource(client, attach)).id;
      const body = await updateBody(client, target, component, given);
      if (ctx.string("name") !== undefined) body.name = ctx.string("name");
      source = (
        await ctx.progress(`Updating ${attach} with ${file}…`, () =>
          client.put<{ data: Source }>(sourcePath(target), body),
        )
      ).data;
    } else {
      source = (
        await ctx.progress(deployingLabel(file, component), () =>
          client.post<{ data: Source }>("/v1/sources", {
            ...component,
            name: ctx.string("name"),
            configured_props: given,
          }),
        )
      ).data;
    }
    const s = source;
    if (ctx.json) ctx.print(formatJson(s, 0));
    else {
      ctx.print(
        ctx.paint(
          "green",
          printable(`${attach !== undefined ? "Attached to" : "Deployed"} ${s.name_slug} (${s.id}).`),
        ),
      );
      describeSource(ctx, s);
    }

    const stop = untilInterrupted();
    const reloader = new Reloader(ctx, client, file, s, first.code, given);
    try {
      reloader.watcher.watch(first.inputs);
      const n = reloader.watcher.size;
      ctx.note(`Watching ${n} file${n === 1 ? "" : "s"} for changes.`);
      const since = await startIds(client, s, attach !== undefined);
      await follow(ctx, s.id, channels, since, formatAnyEntry, stop.signal, {
        banner: printable(
          `Printing the events, console output and errors of ${s.name_slug} (${s.id}) as they come; each save of ${file} updates it (Ctrl-C to stop)…`,
        ),
      });
    } finally {
      reloader.watcher.close();
      stop.dispose();
      // An update under way finishes before the source is deleted or left.
      await reloader.settled();
    }
    if (ctx.boolean("delete")) {
      await client.delete(sourcePath(s.id));
      ctx.note(printable(`Deleted source ${s.id}.`));
    } else {
      ctx.note(
        printable(
          `Kept ${s.name_slug} (${s.id}): \`fount dev --dc ${s.id} ${file}\` attaches to it again, \`fount delete ${s.id}\` deletes it.`,
        ),
      );
    }
    return 0;
  },
};

export const devCommands: Command[] = [dev];
