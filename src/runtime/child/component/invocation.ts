/**
 * One invocation inside the executor process: what it collects (emits, logs, db writes, warnings, the
 * HTTP response), with the limits on each, and how an emit's meta and an `http.respond()` argument are
 * read. Runs in the sandboxed child: imports only node: built-ins.
 */
import { maxTimeMs } from "../../../clock.ts";
import type { SerializedError } from "../../../errors.ts";
import type { EmitMeta, EmittedEvent, HttpResponse, LogEntry } from "../../types.ts";
import { jsonTextTooDeep, maxValueDepth } from "../guards/json-depth.ts";
import type { ChildInit } from "../protocol.ts";

type Obj = Record<string, unknown>;

function isObject(value: unknown): value is Obj {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The state of one running invocation; closed once its result has been taken. */
export class Invocation {
  readonly q: number;
  readonly sourceId: string;
  readonly emits: EmittedEvent[] = [];
  readonly logs: LogEntry[] = [];
  readonly warnings: SerializedError[] = [];
  /** db writes of this invocation, as JSON text, applied to the source's db only if it succeeds. */
  readonly writes = new Map<string, string>();
  /** Characters of emitted JSON, to bound the size of a results message. */
  emittedChars = 0;
  /** UTF-8 bytes of the kept emits' JSON, events and meta, held against `maxRunEmitBytes`. */
  emittedBytes = 0;
  /**
   * Set by the emit that took the invocation over `maxRunEmitBytes`: the run fails with it even when
   * the component catches what that emit threw.
   */
  failure: Error | undefined;
  response: HttpResponse | undefined;
  closed = false;
  private readonly limits: ChildInit;
  private readonly onRespond: (q: number, response: HttpResponse) => void;
  private readonly onLateEmit: ((q: number) => void) | undefined;
  private lateReported = false;
  /** Kinds of `notice` already written in this invocation. */
  private readonly noticed = new Set<string>();

  constructor(
    q: number,
    sourceId: string,
    limits: ChildInit,
    onRespond: (q: number, response: HttpResponse) => void,
    /** Told once when code this invocation left behind (a timer, a promise) emits after it ended. */
    onLateEmit?: (q: number) => void,
  ) {
    this.q = q;
    this.sourceId = sourceId;
    this.limits = limits;
    this.onRespond = onRespond;
    this.onLateEmit = onLateEmit;
  }

  /** Records a console line; false when the invocation is over (the caller prints it elsewhere). */
  log(level: LogEntry["level"], message: string): boolean {
    if (this.closed) return false;
    if (this.logs.length >= this.limits.maxLogsPerInvocation) {
      this.countWarning(
        "too_many_logs",
        `Only the first ${this.limits.maxLogsPerInvocation} log lines are kept`,
      );
      return true;
    }
    const max = this.limits.maxLogEntryChars;
    const text =
      message.length > max ? `${message.slice(0, max)}… [${message.length - max} more characters]` : message;
    this.logs.push({ level, message: text, ts: Date.now() });
    return true;
  }

  emit(event: unknown, meta: unknown): void {
    if (this.closed) {
      // The result has left: the event cannot be stored. Say so once rather than drop it silently.
      if (!this.lateReported) {
        this.lateReported = true;
        this.onLateEmit?.(this.q);
      }
      return;
    }
    // Past the run's byte limit every emit throws at once: the run fails anyway (runItem).
    if (this.failure) throw this.failure;
    const { maxEmitsPerInvocation: maxCount, maxEmitBytes: maxBytes } = this.limits;
    if (this.emits.length >= maxCount) {
      this.countWarning("too_many_emits", `Only the first ${maxCount} emits of an invocation are kept`);
      return;
    }
    let json: string | undefined;
    try {
      json = JSON.stringify(event);
    } catch (err) {
      throw new TypeError(`$emit: the event is not JSON-serializable (${(err as Error).message})`);
    }
    json ??= "null";
    const bytes = Buffer.byteLength(json);
    if (bytes > maxBytes) {
      this.countWarning(
        "emit_too_large",
        `An event of ${bytes} bytes was not emitted: the limit is ${maxBytes} bytes`,
      );
      return;
    }
    // After the size check: an event over the limit is refused without scanning all of it.
    if (jsonTextTooDeep(json, maxValueDepth)) {
      this.countWarning(
        "emit_too_deep",
        `An event nested deeper than ${maxValueDepth} levels was not emitted: it could not be stored`,
      );
      return;
    }
    // The meta is read once the event is known to be kept, so that its warnings concern a stored event.
    const kept = emitMeta(meta, (kind, text) => this.notice(kind, text));
    this.holdRunBytes(bytes + emitMetaBytes(kept));
    this.emits.push({ event: JSON.parse(json), meta: kept, bytes });
    this.emittedChars += json.length;
  }

  /**
   * Counts an emit's bytes against the run's limit, or throws at the emit that crosses it. One run's
   * emits cross to the server in one message and land in one commit, so this bounds what a single run
   * makes the server hold (docs/isolation.md, "How much one run may emit").
   */
  private holdRunBytes(bytes: number): void {
    const max = this.limits.maxRunEmitBytes;
    if (this.emittedBytes + bytes <= max) {
      this.emittedBytes += bytes;
      return;
    }
    this.failure = Object.assign(
      new RangeError(
        `$emit: this run's emits would hold ${this.emittedBytes + bytes} bytes of JSON, over the limit of ${max} per run (FOUNT_MAX_RUN_EMIT_BYTES); the run fails, and its emits and db writes are discarded`,
      ),
      { code: "run_emits_too_large" },
    );
    throw this.failure;
  }

  /**
   * Keeps the first response for the result: the server sends it once the invocation's commit is
   * durable. Only `immediate: true` (the component's explicit opt-out) sends it to the server at once.
   */
  respond(res: unknown): void {
    const response = httpResponse(res);
    const immediate = isObject(res) ? res.immediate : undefined;
    if (immediate !== undefined && immediate !== null && typeof immediate !== "boolean") {
      throw new TypeError(
        `http.respond: immediate must be true or false, not a value of type ${typeof immediate}`,
      );
    }
    if (this.response || this.closed) return;
    this.response = response;
    if (immediate === true) this.onRespond(this.q, response);
  }

  /** A warning for `$errors` from outside the component's calls (once per kind). */
  warn(code: string, message: string): void {
    this.countWarning(code, message);
  }

  /**
   * A warning on `$logs` about something the component did that Fount tolerated (a meta.ts that is not
   * a time, say): once per kind and invocation, so a loop of such emits writes one line.
   */
  private notice(kind: string, message: string): void {
    if (this.noticed.has(kind)) return;
    this.noticed.add(kind);
    this.log("warn", message);
  }

  /** One warning per kind, counting how often it happened. */
  private countWarning(code: string, message: string): void {
    const found = this.warnings.find((w) => w.code === code);
    if (found?.data) found.data.count = (found.data.count as number) + 1;
    else this.warnings.push({ code, message, data: { count: 1 } });
  }
}

/**
 * The meta of an emit, as far as it can be used. Pipedream's components pass what their APIs give them
 * (gitlab-new-commit emits `ts: Date.parse(undefined)`, NaN, with every real answer), so a field that
 * cannot be used is left out and the event kept: a `ts` that is not a time leaves the event its arrival
 * time, an unusable `id` leaves it without one, and so on, each with a warning on `$logs`
 * (docs/pipedream-compatibility.md). Nothing here fails the run.
 */
function emitMeta(meta: unknown, warn: (kind: string, message: string) => void): EmitMeta {
  if (meta === undefined || meta === null) return {};
  if (!isObject(meta)) {
    warn(
      "meta",
      `$emit: meta must be an object {id, name, summary, ts}, not ${described(meta)}; the event was kept without it`,
    );
    return {};
  }
  const out: EmitMeta = {};
  const { id, name, summary, ts, delivery_ts } = meta;
  if (id !== undefined && id !== null) {
    if (typeof id === "string" || (typeof id === "number" && Number.isFinite(id))) out.id = id;
    else if (typeof id === "bigint") out.id = String(id);
    else
      warn(
        "meta.id",
        `$emit: meta.id must be a string or a number, not ${described(id)}; the event was kept without an id`,
      );
  }
  if (name !== undefined && name !== null) {
    const text = typeof name === "number" || typeof name === "bigint" ? String(name) : name;
    if (typeof text === "string") out.name = text;
    else
      warn(
        "meta.name",
        `$emit: meta.name must be a string, not ${described(name)}; the event went to the default channel`,
      );
    if (out.name?.includes("\0")) {
      // PostgreSQL's text cannot hold U+0000, and no API call could name such a channel.
      out.name = out.name.replaceAll("\0", "\uFFFD");
      warn(
        "meta.name.nul",
        `$emit: meta.name holds the NUL character (U+0000); the event went to channel ${JSON.stringify(out.name)}, with U+FFFD in its place`,
      );
    }
  }
  if (summary !== undefined && summary !== null) {
    if (typeof summary === "string") out.summary = summary;
    else if (typeof summary === "number" || typeof summary === "boolean" || typeof summary === "bigint")
      out.summary = String(summary);
    else
      warn(
        "meta.summary",
        `$emit: meta.summary must be a string, not ${described(summary)}; the event was kept without a summary`,
      );
  }
  if (ts !== undefined && ts !== null) {
    // Components pass what their APIs give them: epoch ms, a Date (pg rows), or a date string.
    const ms =
      ts instanceof Date
        ? ts.getTime()
        : typeof ts === "string"
          ? /^\s*-?\d+(\.\d+)?\s*$/.test(ts)
            ? Number(ts)
            : Date.parse(ts)
          : ts;
    if (typeof ms === "number" && Number.isFinite(ms)) out.ts = ms;
    else
      warn(
        "meta.ts",
        `$emit: meta.ts must be epoch ms, a Date or a date string, not ${described(ts)}; the event was kept with its arrival time`,
      );
  }
  if (delivery_ts !== undefined && delivery_ts !== null) {
    const ms = delivery_ts instanceof Date ? delivery_ts.getTime() : delivery_ts;
    if (typeof ms !== "number" || !Number.isFinite(ms))
      warn(
        "meta.delivery_ts",
        `$emit: meta.delivery_ts must be epoch ms or a Date, not ${described(delivery_ts)}; the event is delivered at once`,
      );
    // Past the last time a Date holds it is no time either (nanoseconds, say): the stores cannot keep it
    // as a due time (PostgreSQL's bigint ends at 2^63, and SQLite kept integers JavaScript cannot read).
    else if (Math.abs(ms) > maxTimeMs)
      warn(
        "meta.delivery_ts.range",
        `$emit: meta.delivery_ts must be epoch ms from -8.64e15 to 8.64e15 (the times a Date holds), not ${ms}; the event is delivered at once`,
      );
    else out.delivery_ts = ms;
  }
  return out;
}

/** UTF-8 bytes of a kept meta's text fields (its numbers are a few bytes each: not counted). */
function emitMetaBytes(meta: EmitMeta): number {
  let bytes = 0;
  for (const text of [meta.id, meta.name, meta.summary])
    if (typeof text === "string") bytes += Buffer.byteLength(text);
  return bytes;
}

/** A value as a warning names it: `NaN`, `"soon"`, `an invalid Date`, `a value of type object`. */
function described(value: unknown): string {
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  if (typeof value === "string") return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (value instanceof Date) return "an invalid Date";
  if (Array.isArray(value)) return "an array";
  return `a value of type ${typeof value}`;
}

function httpResponse(res: unknown): HttpResponse {
  if (!isObject(res)) throw new TypeError("http.respond: pass an object {status, headers, body}");
  const sandbox = res.sandbox;
  if (sandbox !== undefined && sandbox !== null && typeof sandbox !== "boolean") {
    throw new TypeError(`http.respond: sandbox must be true or false, not a value of type ${typeof sandbox}`);
  }
  const response = responseParts(res);
  if (sandbox === false) response.sandbox = false;
  return response;
}

function responseParts(res: Obj): HttpResponse {
  const raw = res.status;
  const status = typeof raw === "string" && /^\s*\d+\s*$/.test(raw) ? Number(raw) : raw;
  if (typeof status !== "number" || !Number.isInteger(status) || status < 100 || status > 599) {
    throw new TypeError(
      `http.respond: status must be an integer from 100 to 599, not ${JSON.stringify(raw)}`,
    );
  }
  const headers: Record<string, string | string[]> = {};
  if (res.headers !== undefined && res.headers !== null) {
    if (!isObject(res.headers)) throw new TypeError("http.respond: headers must be an object");
    for (const [name, value] of Object.entries(res.headers)) {
      if (value === undefined || value === null) continue;
      if (!Array.isArray(value)) headers[name] = String(value);
      // Cookies cannot be joined into one line (their dates hold commas): one header line each.
      else if (name.toLowerCase() === "set-cookie") headers[name] = value.map(String);
      else headers[name] = value.map(String).join(", ");
    }
  }
  const body = res.body;
  if (body === undefined || body === null) return { status, headers, body: null };
  if (typeof body === "string") return { status, headers, body };
  if (body instanceof Uint8Array || body instanceof ArrayBuffer) {
    const bytes =
      body instanceof ArrayBuffer
        ? Buffer.from(body)
        : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
    return { status, headers, body: bytes.toString("base64"), bodyBase64: true };
  }
  let json: string | undefined;
  try {
    json = JSON.stringify(body);
  } catch (err) {
    throw new TypeError(`http.respond: the body is not JSON-serializable (${(err as Error).message})`);
  }
  if (!Object.keys(headers).some((h) => h.toLowerCase() === "content-type")) {
    headers["content-type"] = "application/json; charset=utf-8";
  }
  return { status, headers, body: json ?? null };
}
