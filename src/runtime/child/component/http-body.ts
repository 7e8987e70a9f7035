/**
 * The `body` of a source's HTTP event, parsed from `bodyRaw` by its content type: JSON parsed (text
 * that is not JSON stays text), forms to an object (repeated keys to arrays), anything else as text.
 * The server hands endpoint events over without `body` and the executor parses it here, so that this
 * work, and the bytes of a second copy of the body, stay off the server's thread.
 *
 * JSON nested deeper than `maxBodyDepth` stays text too (and the owner is told on `$errors`): parsed, it
 * could not be serialized again when the emit is stored.
 */
import { jsonTextTooDeep, maxBodyDepth } from "../guards/json-depth.ts";

export function parseBody(raw: string, contentType: string, onTooDeep?: () => void): unknown {
  if (raw === "") return undefined;
  if (/\bjson\b/i.test(contentType)) {
    if (jsonTextTooDeep(raw, maxBodyDepth)) {
      onTooDeep?.();
      return raw;
    }
    try {
      return JSON.parse(raw);
    } catch {
      return raw;
    }
  }
  if (/application\/x-www-form-urlencoded/i.test(contentType)) {
    const out: Record<string, string | string[]> = {};
    for (const [k, v] of new URLSearchParams(raw)) {
      const prev = out[k];
      out[k] = prev === undefined ? v : Array.isArray(prev) ? [...prev, v] : [prev, v];
    }
    return out;
  }
  return raw;
}

/** The endpoint event `event` with `body` parsed and placed right after `bodyRaw`. */
export function withParsedBody(event: unknown, onTooDeep?: () => void): unknown {
  if (typeof event !== "object" || event === null) return event;
  const e = event as Record<string, unknown>;
  const headers = e.headers as Record<string, unknown> | undefined;
  const type = typeof headers?.["content-type"] === "string" ? (headers["content-type"] as string) : "";
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(e)) {
    out[key] = value;
    if (key === "bodyRaw") out.body = parseBody(typeof value === "string" ? value : "", type, onTooDeep);
  }
  return out;
}
