/**
 * Whether the CLI's plain-JavaScript bundle (dist/cli, built by scripts/build-cli.ts at `npm ci`) may
 * run: only while it is newer than every module it was built from, so that an edited source is never
 * shadowed by a stale build (`bin/fount.mjs` then runs the sources).
 */
import { readFileSync, statSync } from "node:fs";
import { fileURLToPath } from "node:url";

/** The bundle's entry URL when it was built after its inputs last changed; else undefined. */
export function freshBundle() {
  const at = (relative) => fileURLToPath(new URL(relative, import.meta.url));
  try {
    const inputsFile = at("../dist/cli/inputs.json");
    const built = statSync(inputsFile).mtimeMs;
    const inputs = JSON.parse(readFileSync(inputsFile, "utf8"));
    for (const input of inputs) if (statSync(at(`../${input}`)).mtimeMs > built) return undefined;
    return new URL("../dist/cli/main.mjs", import.meta.url).href;
  } catch {
    return undefined;
  }
}
