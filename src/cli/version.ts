/** The CLI's version: the package's. A module of its own so that `fount --version` loads nothing else. */
import { readFileSync } from "node:fs";

export function readVersion(): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as {
      version?: string;
    };
    return pkg.version ?? "unknown";
  } catch {
    return "unknown";
  }
}
