/** `fount init [dir]`: writes a starter component that deploys as it is. */
import { lstat, mkdir, unlink, writeFile } from "node:fs/promises";
import path from "node:path";
import { CliError, type Command } from "../command.ts";
import { type TemplateName, templateCode, templateNames, templateSummaries } from "../templates.ts";

/** A component key from a folder name: `New Orders/` → `new-orders`. */
export function keyFromFolder(folder: string): string {
  return (
    path
      .basename(path.resolve(folder))
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, "-")
      .replace(/^-+|-+$/g, "") || "my-source"
  );
}

const init: Command = {
  name: "init",
  summary: "Write a starter component (HTTP, timer or polling source) that deploys as it is",
  usage: "[dir] [--template http|timer|polling] [--force]",
  args: { min: 0, max: 1 },
  options: {
    template: {
      type: "string",
      short: "t",
      value: "http|timer|polling",
      description: "Which starter (default: http)",
    },
    force: { type: "boolean", description: "Overwrite the file when it exists (never a symbolic link)" },
  },
  description: [
    "Writes <dir>/<name>.mjs, <name> being the folder's name as a component key (the current folder",
    "when no dir is given; the folder is created when missing). Templates:",
    ...templateNames.map((t) => `  ${t.padEnd(8)} ${templateSummaries[t]}`),
    "",
    "Examples:",
    "  fount init new-requests",
    "  fount init new-orders --template polling && fount dev new-orders/new-orders.mjs",
  ].join("\n"),
  async run(ctx) {
    const dir = ctx.args[0] ?? ".";
    const template: TemplateName = ctx.choice("template", templateNames) ?? "http";
    const key = keyFromFolder(dir);
    const file = path.join(dir, `${key}.mjs`);
    // What is there, a link included (one pointing nowhere too): never written through.
    const there = await lstat(file).catch(() => undefined);
    if (there?.isSymbolicLink())
      throw new CliError(`${file} is a symbolic link; not writing through it`, "file_is_link");
    if (there && !ctx.boolean("force"))
      throw new CliError(`${file} exists; --force overwrites it`, "file_exists");
    if (there && !there.isFile())
      throw new CliError(`${file} exists and is not a file; not overwriting it`, "file_exists");
    await mkdir(dir, { recursive: true });
    if (there) await unlink(file);
    // "wx": a new file, so that a link put there meanwhile is refused rather than followed.
    await writeFile(file, templateCode(template, key), { flag: "wx" }).catch((err: NodeJS.ErrnoException) => {
      if (err.code === "EEXIST")
        throw new CliError(`${file} appeared while it was written; run again`, "file_exists");
      throw err;
    });
    ctx.output({ file, key, template }, () => {
      ctx.print(`Wrote ${file}: ${templateSummaries[template]}.`);
      ctx.print("");
      ctx.print(`  fount deploy ${file}    deploy it`);
      ctx.print(`  fount dev ${file}       deploy it and update it on every save`);
    });
    return 0;
  },
};

export const initCommands: Command[] = [init];
