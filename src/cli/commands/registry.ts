/** `fount registry publish <file>`: publishes a local component to the server's registry (admin key). */
import { access } from "node:fs/promises";
import { CliError, type Command } from "../command.ts";
import { fields, printable, table } from "../output.ts";

/** The part of a registry publish answer the CLI reads. */
interface Published {
  id: string;
  key: string;
  name: string;
  version: string;
  code_hash: string;
  created: boolean;
}

const publishRegistry: Command = {
  name: "registry publish",
  summary: "Publish a component to the registry, where `key` deploys it (admin key)",
  usage: "<file>",
  args: { min: 1, max: 1 },
  description: [
    "The file is bundled with the local files it imports (packages stay imports) and sent to",
    "POST /v1/admin/registry. It needs a `key` and a semantic `version`. Publishing unchanged code",
    "again changes nothing; changed code becomes the version that `key` finds.",
    "",
    "Example:",
    "  fount registry publish components/acme/new-order.mjs",
  ].join("\n"),
  async run(ctx) {
    const file = ctx.arg(0, "<file>");
    try {
      await access(file);
    } catch {
      throw new CliError(`No file ${file}`, "file_not_found");
    }
    // Loaded on use: esbuild is only needed by the commands that bundle.
    const { bundleLocalComponent } = await import("../bundle.ts");
    const code = await bundleLocalComponent(file);
    const client = ctx.client();
    const res = await ctx.progress(
      `Publishing ${file} (the server builds it and installs any packages it imports)…`,
      () => client.post<{ data: Published }>("/v1/admin/registry", { component_code: code }),
    );
    const c = res.data;
    ctx.output(c, () => {
      ctx.print(
        printable(
          c.created
            ? `Published ${c.key} ${c.version} to the registry.`
            : `${c.key} ${c.version} is already in the registry with this code; nothing changed.`,
        ),
      );
      ctx.print(
        fields([
          ["Component", c.id],
          ["Key", c.key],
          ["Name", c.name],
          ["Version", c.version],
        ]),
      );
    });
  },
};

/** A registry component as `GET /v1/components/registry` lists it. */
interface RegistryEntry {
  id: string;
  key: string | null;
  name: string;
  version: string;
  description: string | null;
  apps: string[];
}

const listComponents: Command = {
  name: "list components",
  summary: "Browse the registry's components, which `fount deploy <key>` deploys",
  usage: "[<words>] [--app <slug>]",
  args: { min: 0, max: 10 },
  options: {
    app: { type: "string", value: "slug", description: "Only components with this app's props" },
  },
  description: [
    "Words, when given, must all appear in the key, name or description.",
    "",
    "Examples:",
    "  fount list components",
    "  fount list components cron",
  ].join("\n"),
  async run(ctx) {
    const words = ctx.args.join(" ").trim();
    const data = await ctx.client().listAll<RegistryEntry>("/v1/components/registry", {
      q: words || undefined,
      app: ctx.string("app"),
    });
    ctx.output(data, () => {
      if (data.length === 0) return ctx.print("No components.");
      ctx.print(
        table(data, [
          { header: "KEY", value: (c) => c.key ?? c.id },
          { header: "NAME", value: (c) => c.name },
          { header: "VERSION", value: (c) => c.version },
          { header: "DESCRIPTION", value: (c) => (c.description ?? "").slice(0, 60) },
        ]),
      );
    });
  },
};

export const registryCommands: Command[] = [publishRegistry, listComponents];
