/** Event stream (channel) names: `""` is the default channel, and `default` names it too. */
import { invalidParameter } from "../../errors.ts";

export const channelPattern = "^(|\\$errors|\\$logs|[A-Za-z0-9_][A-Za-z0-9_.:-]{0,63})$";

/** Normalises a channel name as given by a client: `default` → `""`; anything malformed is a 400. */
export function normalizeChannel(name: string | undefined, field = "event_name"): string {
  if (name === undefined || name === "" || name === "default") return "";
  if (!new RegExp(channelPattern).test(name) && name !== "$errors" && name !== "$logs") {
    throw invalidParameter(
      field,
      `${field} must be empty, default, $errors, $logs or a channel name of letters, digits, _ . : -`,
    );
  }
  return name;
}

/** Whether an emitter ID (or glob) matches a concrete emitter ID: `dc_*` all sources, `p_*` all workflows. */
export function emitterMatches(pattern: string, emitterId: string): boolean {
  if (pattern.endsWith("_*")) return emitterId.startsWith(pattern.slice(0, -1));
  return pattern === emitterId;
}

/**
 * A channel name from component code (`$emit` meta.name): anything textual is kept, `default` is `""`,
 * and U+0000, which PostgreSQL's text cannot hold, becomes U+FFFD (the executor says so on `$logs`).
 */
export function normalizeChannelLoose(name: unknown): string {
  if (typeof name !== "string" || name === "" || name === "default") return "";
  const cut = name.slice(0, 64);
  return cut.includes("\0") ? cut.replaceAll("\0", "\uFFFD") : cut;
}
