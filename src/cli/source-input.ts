/**
 * What `fount deploy` and `fount update` send: the component (a bundled local file, a URL, or a
 * registry key) and `configured_props` from `--prop name=value` flags.
 */
import { readdir, readFile, stat } from "node:fs/promises";
import path from "node:path";
import { CliError, UsageError } from "./command.ts";

/** The component fields of POST/PUT /v1/sources. */
export type ComponentFields = { component_code: string } | { component_url: string } | { key: string };

/**
 * A local file is bundled with the local files it imports (packages stay imports, for the server to
 * install); an http(s) URL is fetched by the server; anything else is a component key, looked up
 * among your components and then the registry. A path-looking argument that is no file is an error
 * rather than a key, so that a typo is not sent to the registry.
 */
export async function componentFields(target: string): Promise<ComponentFields> {
  if (/^https?:\/\//i.test(target)) return { component_url: target };
  const isFile = await stat(target).then(
    (s) => s.isFile(),
    () => false,
  );
  if (isFile) {
    // Loaded on use: esbuild is only needed by the commands that bundle.
    const { bundleLocalComponent } = await import("./bundle.ts");
    return { component_code: await bundleLocalComponent(target) };
  }
  if (/[/\\]/.test(target) || /\.(m|c)?[jt]s$/.test(target))
    throw new CliError(`No file ${target}`, "file_not_found");
  return { key: target };
}

const accountId = /^apn_[A-Za-z0-9]+$/;

/**
 * One `--prop` value: an app account ID (`apn_…`) becomes `{"authProvisionId": …}`; text that parses
 * as JSON is that JSON (numbers, booleans, objects, arrays, quoted strings); anything else is a string.
 */
export function propValue(raw: string): unknown {
  if (accountId.test(raw)) return { authProvisionId: raw };
  try {
    return JSON.parse(raw);
  } catch {
    return raw;
  }
}

/** `--prop name=value` flags as a `configured_props` object; a repeated name keeps the last value. */
export function parseProps(flags: unknown, command: string): Record<string, unknown> {
  const list = Array.isArray(flags) ? flags : flags === undefined ? [] : [flags];
  const out: Record<string, unknown> = {};
  for (const item of list) {
    const text = String(item);
    const eq = text.indexOf("=");
    if (eq <= 0) throw new UsageError(`--prop takes name=value, not "${text}"`, command);
    out[text.slice(0, eq)] = propValue(text.slice(eq + 1));
  }
  return out;
}

/** Files looked at, at most, when listing local components: the picker is no search engine. */
const maxScannedFiles = 200;

/**
 * Component files in `dir` and its direct subfolders (not `node_modules` or hidden ones), as relative
 * paths: JavaScript or TypeScript files with a default export that has `props` or `run`.
 */
export async function localComponentFiles(dir: string): Promise<string[]> {
  const candidates: string[] = [];
  const visit = async (folder: string, depth: number) => {
    const entries = await readdir(folder, { withFileTypes: true }).catch(() => []);
    for (const e of entries.sort((a, b) => a.name.localeCompare(b.name))) {
      if (candidates.length >= maxScannedFiles || e.name.startsWith(".") || e.name === "node_modules")
        continue;
      const full = path.join(folder, e.name);
      if (e.isDirectory() && depth === 0) await visit(full, 1);
      else if (e.isFile() && /\.(m|c)?[jt]s$/.test(e.name) && !e.name.endsWith(".d.ts"))
        candidates.push(full);
    }
  };
  await visit(dir, 0);
  const found: string[] = [];
  for (const file of candidates) {
    const text = await readFile(file, "utf8").catch(() => "");
    if (/export\s+default|module\.exports/.test(text) && /\b(props|run)\s*[:(]/.test(text))
      found.push(`./${path.relative(dir, file).split(path.sep).join("/")}`);
  }
  return found;
}
