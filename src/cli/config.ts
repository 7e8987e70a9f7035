/**
 * The CLI's config file, an INI file like pd's: top-level `url`, `api_key`, `org_id` form the default
 * profile, and each `[name]` section another profile. Edits keep the user's comments, order and unknown
 * keys; the file is written atomically with mode 0600 because it holds API keys.
 */
import { chmodSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";

/** The settings a profile may hold; other keys are kept as they are. */
export interface Profile {
  url?: string;
  api_key?: string;
  org_id?: string;
  [key: string]: string | undefined;
}

/** The name used for the top-level keys; `-p default` selects them too. */
export const defaultProfile = "default";

const profileNamePattern = /^[A-Za-z0-9_.-]{1,64}$/;

export function isValidProfileName(name: string): boolean {
  return profileNamePattern.test(name);
}

/** `$FOUNT_CONFIG`, else `$XDG_CONFIG_HOME/fount/config`, else `~/.config/fount/config`. */
export function configPath(env: NodeJS.ProcessEnv): string {
  if (env.FOUNT_CONFIG) return path.resolve(env.FOUNT_CONFIG);
  // The XDG spec says to ignore a relative XDG_CONFIG_HOME.
  const xdg = env.XDG_CONFIG_HOME;
  if (xdg && path.isAbsolute(xdg)) return path.join(xdg, "fount", "config");
  return path.join(env.HOME || os.homedir(), ".config", "fount", "config");
}

type Line =
  | { kind: "other"; text: string }
  | { kind: "section"; name: string; text: string }
  | { kind: "entry"; key: string; value: string; text: string };

function parseLine(text: string): Line {
  const trimmed = text.trim();
  if (trimmed === "" || trimmed.startsWith("#") || trimmed.startsWith(";")) return { kind: "other", text };
  const section = /^\[\s*([^\]]*?)\s*\]$/.exec(trimmed);
  if (section) return { kind: "section", name: section[1]!, text };
  const eq = trimmed.indexOf("=");
  if (eq <= 0) return { kind: "other", text };
  return {
    kind: "entry",
    key: trimmed.slice(0, eq).trim(),
    value: unquote(trimmed.slice(eq + 1).trim()),
    text,
  };
}

function unquote(value: string): string {
  const first = value[0];
  if (value.length >= 2 && (first === '"' || first === "'") && value.endsWith(first))
    return value.slice(1, -1);
  return value;
}

/** The parsed file, with edits that keep every line they do not touch. */
export class ConfigFile {
  readonly path: string;
  #lines: Line[];

  constructor(filePath: string, text = "") {
    this.path = filePath;
    this.#lines =
      text === ""
        ? []
        : text
            .replace(/\r?\n$/, "")
            .split(/\r?\n/)
            .map(parseLine);
  }

  /** Reads the file; a missing file is an empty config. */
  static read(filePath: string): ConfigFile {
    let text = "";
    try {
      text = readFileSync(filePath, "utf8");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    }
    return new ConfigFile(filePath, text);
  }

  /** Index range [start, end) of a profile's lines, header excluded; undefined when absent. */
  #range(profile: string): { start: number; end: number } | undefined {
    const top = profile === defaultProfile;
    let start = top ? 0 : -1;
    for (let i = 0; i < this.#lines.length; i++) {
      const line = this.#lines[i]!;
      if (line.kind !== "section") continue;
      if (start >= 0) return { start, end: i };
      if (line.name === profile) start = i + 1;
    }
    return start >= 0 ? { start, end: this.#lines.length } : undefined;
  }

  /** The profile's keys, or undefined when there is no such section. */
  profile(profile: string): Profile | undefined {
    const range = this.#range(profile);
    if (!range) return undefined;
    const out: Profile = {};
    for (const line of this.#lines.slice(range.start, range.end))
      if (line.kind === "entry") out[line.key] = line.value;
    return out;
  }

  /** Names of the `[sections]`, in file order. */
  sectionNames(): string[] {
    return this.#lines.flatMap((l) => (l.kind === "section" ? [l.name] : []));
  }

  /** Sets (or, with undefined, removes) keys of a profile, creating its section when needed. */
  set(profile: string, values: Record<string, string | undefined>): void {
    for (const [key, value] of Object.entries(values)) {
      let range = this.#range(profile);
      if (!range) {
        if (value === undefined) continue;
        if (this.#lines.length > 0 && this.#lines[this.#lines.length - 1]!.text.trim() !== "")
          this.#lines.push({ kind: "other", text: "" });
        this.#lines.push({ kind: "section", name: profile, text: `[${profile}]` });
        range = { start: this.#lines.length, end: this.#lines.length };
      }
      const index = this.#lines.findIndex(
        (l, i) => i >= range.start && i < range.end && l.kind === "entry" && l.key === key,
      );
      if (value === undefined) {
        if (index >= 0) this.#lines.splice(index, 1);
        continue;
      }
      const line: Line = { kind: "entry", key, value, text: `${key} = ${value}` };
      if (index >= 0) {
        this.#lines[index] = line;
        continue;
      }
      // After the profile's last entry, so that blank lines and comments before the next section stay put.
      let at = range.start;
      for (let i = range.start; i < range.end; i++) if (this.#lines[i]!.kind === "entry") at = i + 1;
      this.#lines.splice(at, 0, line);
    }
  }

  /** Removes a `[section]` and its lines; for the default profile, its keys. */
  removeProfile(profile: string): void {
    const range = this.#range(profile);
    if (!range) return;
    if (profile === defaultProfile) {
      this.#lines = this.#lines.filter((l, i) => i >= range.end || l.kind !== "entry");
      return;
    }
    this.#lines.splice(range.start - 1, range.end - range.start + 1);
  }

  toString(): string {
    const text = this.#lines.map((l) => l.text).join("\n");
    return text === "" ? "" : `${text}\n`;
  }

  /** Writes atomically (temp file and rename) with mode 0600, in a 0700 directory when it creates one. */
  write(): void {
    mkdirSync(path.dirname(this.path), { recursive: true, mode: 0o700 });
    const temp = `${this.path}.${process.pid}.tmp`;
    // A new file: one planted at that name (a link, in a folder others may write) is refused, not written through.
    rmSync(temp, { force: true });
    writeFileSync(temp, this.toString(), { mode: 0o600, flag: "wx" });
    // The umask may have narrowed the mode only; make sure no group or other bits survive.
    chmodSync(temp, 0o600);
    renameSync(temp, this.path);
  }
}
