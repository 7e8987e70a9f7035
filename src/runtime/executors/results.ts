/**
 * Messages from an executor are untrusted (they come from a process running the owner's code): its
 * results, errors and HTTP answers are copied field by field here, with the limits enforced again.
 */
import { maxTimeMs } from "../../clock.ts";
import type { SerializedError } from "../../errors.ts";
import { jsonLength } from "../child/guards/json-size.ts";
import type { ChildInit, ItemResult } from "../child/protocol.ts";
import type { EmittedEvent, HttpResponse, InvokeResult, LogEntry } from "../types.ts";
import { isObject, LOG_ENTRY_CHARS } from "./model.ts";

/** Copies a child's result field by field, enforcing the limits the child was asked to keep. */
export function copyResult(raw: ItemResult, limits: ChildInit): InvokeResult {
  const { maxLogsPerInvocation } = limits;
  // A failed run's emits are never stored: they are not even measured.
  const copied = raw.error === undefined ? copyEmits(raw.emits, limits) : { emits: [] };
  const logs: LogEntry[] = [];
  if (Array.isArray(raw.logs)) {
    for (const l of raw.logs.slice(0, maxLogsPerInvocation)) {
      if (!isObject(l) || typeof l.message !== "string") continue;
      const level = ["log", "info", "warn", "error", "debug"].includes(l.level as string)
        ? (l.level as LogEntry["level"])
        : "log";
      logs.push({
        level,
        message: cut(l.message, LOG_ENTRY_CHARS + 64),
        ts: typeof l.ts === "number" ? l.ts : Date.now(),
      });
    }
  }
  const result: InvokeResult = {
    emits: copied.emits,
    logs,
    dbWrites: isObject(raw.dbWrites) ? raw.dbWrites : {},
    warnings: Array.isArray(raw.warnings)
      ? raw.warnings.slice(0, 10).map((w) => serialized(w, "warning"))
      : [],
    durationMs: typeof raw.durationMs === "number" ? raw.durationMs : 0,
  };
  if (copied.warning) result.warnings.push(copied.warning);
  const error = raw.error !== undefined ? serialized(raw.error, "component_error") : copied.error;
  if (error) {
    result.error = error;
    result.emits = [];
    result.dbWrites = {};
  }
  if ("returnValue" in raw && !result.error) result.returnValue = raw.returnValue;
  const response = httpResponse(raw.response);
  if (response) result.response = response;
  return result;
}

/**
 * A successful run's emits, each measured again as the child should have (a compromised child could
 * send anything): an event over `maxEmitBytes` is dropped with a warning, and emits over
 * `maxRunEmitBytes` in all fail the run, as in the child (child/component/invocation.ts). The server
 * measures by `jsonLength`, not by serializing (docs/isolation.md, "How much one run may emit").
 */
function copyEmits(
  raw: unknown,
  limits: ChildInit,
): { emits: EmittedEvent[]; warning?: SerializedError; error?: SerializedError } {
  const { maxEmitsPerInvocation, maxEmitBytes, maxRunEmitBytes } = limits;
  const emits: EmittedEvent[] = [];
  if (!Array.isArray(raw)) return { emits };
  let total = 0;
  let tooLarge = 0;
  for (const e of raw.slice(0, maxEmitsPerInvocation)) {
    if (!isObject(e)) continue;
    const event = e.event ?? null;
    const atLeast = jsonLength(event);
    if (atLeast > maxEmitBytes) {
      tooLarge++;
      continue;
    }
    // The child's measure of the event's UTF-8 JSON, where it is above the server's own bound: a child
    // can only make its owner's counts larger by overstating it, and understating it changes nothing.
    const bytes =
      typeof e.bytes === "number" && e.bytes > atLeast ? Math.min(e.bytes, maxEmitBytes) : atLeast;
    const meta = copyMeta(e.meta);
    total += bytes + metaBytes(meta);
    if (total > maxRunEmitBytes) {
      const message = `The run's emits held more than ${maxRunEmitBytes} bytes of JSON, the limit per run (FOUNT_MAX_RUN_EMIT_BYTES); the run failed, and its emits and db writes were discarded`;
      return { emits: [], error: { code: "run_emits_too_large", message } };
    }
    emits.push({ event, meta, bytes });
  }
  if (tooLarge === 0) return { emits };
  const message = `An event over ${maxEmitBytes} bytes was not emitted`;
  return { emits, warning: { code: "emit_too_large", message, data: { count: tooLarge } } };
}

function copyMeta(value: unknown): EmittedEvent["meta"] {
  const m = isObject(value) ? value : {};
  const meta: EmittedEvent["meta"] = {};
  if (typeof m.id === "string" || typeof m.id === "number") meta.id = m.id;
  if (typeof m.name === "string") meta.name = m.name;
  if (typeof m.summary === "string") meta.summary = m.summary;
  if (typeof m.ts === "number" && Number.isFinite(m.ts)) meta.ts = m.ts;
  // Within a Date's range, as the child keeps it (invocation.ts): past it no store keeps a due time.
  if (typeof m.delivery_ts === "number" && Math.abs(m.delivery_ts) <= maxTimeMs)
    meta.delivery_ts = m.delivery_ts;
  return meta;
}

/** Characters of a meta's text fields (the child counts their UTF-8 bytes, never fewer). */
function metaBytes(meta: EmittedEvent["meta"]): number {
  let chars = 0;
  for (const text of [meta.id, meta.name, meta.summary]) if (typeof text === "string") chars += text.length;
  return chars;
}

/**
 * The first `max` UTF-16 units of `text`, one fewer when the last would be the first half of a surrogate
 * pair (an emoji at the limit): half a pair is an unpaired surrogate, which no UTF-8 text holds and
 * PostgreSQL's jsonb refuses where the text is stored as JSON (a delivery's first attempt).
 */
function cut(text: string, max: number): string {
  if (text.length <= max) return text;
  const last = text.charCodeAt(max - 1);
  return text.slice(0, last >= 0xd800 && last <= 0xdbff ? max - 1 : max);
}

export function serialized(value: unknown, fallbackCode: string): SerializedError {
  if (!isObject(value)) return { code: fallbackCode, message: String(value) };
  const out: SerializedError = {
    code: typeof value.code === "string" && value.code !== "" ? cut(value.code, 100) : fallbackCode,
    message: typeof value.message === "string" ? cut(value.message, 8192) : "",
  };
  if (typeof value.name === "string") out.name = cut(value.name, 200);
  if (typeof value.stack === "string") out.stack = cut(value.stack, 16 * 1024);
  if (isObject(value.data)) out.data = value.data;
  return out;
}

export function httpResponse(value: unknown): HttpResponse | undefined {
  if (!isObject(value)) return undefined;
  const { status, headers, body } = value;
  if (typeof status !== "number" || !Number.isInteger(status) || status < 100 || status > 599)
    return undefined;
  const clean: Record<string, string | string[]> = {};
  if (isObject(headers)) {
    for (const [k, v] of Object.entries(headers)) {
      if (typeof v === "string") clean[k] = v;
      else if (Array.isArray(v) && v.every((x) => typeof x === "string")) clean[k] = v as string[];
    }
  }
  const response: HttpResponse = { status, headers: clean, body: typeof body === "string" ? body : null };
  if (value.bodyBase64 === true && typeof body === "string") response.bodyBase64 = true;
  if (value.sandbox === false) response.sandbox = false;
  return response;
}
