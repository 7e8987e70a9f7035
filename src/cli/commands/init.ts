/** `fount init [dir]`: writes a starter component that deploys as it is. */
import { mkdir, stat, writeFile } from "node:fs/promises";
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
    force: { type: "boolean", description: "Overwrite the file when it exists" },
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
    const exists = await stat(file).then(
      () => true,
      () => false,
    );
    if (exists && !ctx.boolean("force"))
      throw new CliError(`${file} exists; --force overwrites it`, "file_exists");
    await mkdir(dir, { recursive: true });
    await writeFile(file, templateCode(template, key));
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
