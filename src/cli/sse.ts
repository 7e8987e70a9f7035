/**
 * Following a source's live stream (`GET /sources/{id}/sse`) from the CLI: a small Server-Sent Events
 * reader and a loop that reconnects with the last event ID, so that a dropped connection loses nothing.
 */
import { type ApiClient, ApiError, errorText } from "./client.ts";

/** An event of the stream: the `id:` line and the parsed `data:` (an `event_summaries` entry). */
export interface StreamEntry {
  id: string;
  indexed_at_ms: number;
  event: unknown;
  metadata: Record<string, unknown>;
}

/** One message of an SSE stream. */
export interface SseMessage {
  id: string | undefined;
  data: string;
}

/**
 * Characters of a line, and of a message's data, read at most: a message is one event_summaries entry,
 * whose event the server keeps under FOUNT_MAX_EVENT_BYTES (1 MB by default). A stream past it is
 * broken or hostile, and is closed rather than held in memory.
 */
export const maxMessageChars = 16 * 1024 * 1024;

const tooLarge = () =>
  new ApiError(
    `The stream sent a message over ${maxMessageChars / 1048576} MB; it was closed`,
    "bad_response",
    200,
  );

/**
 * Splits an SSE body into messages; comment lines (`:keepalive`) and unknown fields are skipped. Each
 * character is looked at once (the end of a line is searched in the text just read, never again in a
 * line that goes on); a line or message over `maxMessageChars` ends the stream with ApiError
 * `bad_response`.
 */
export async function* readSse(body: ReadableStream<Uint8Array>): AsyncGenerator<SseMessage> {
  const decoder = new TextDecoder();
  // The start of a line still going on, in pieces, and their length.
  let partial: string[] = [];
  let partialChars = 0;
  let data: string[] = [];
  let dataChars = 0;
  let id: string | undefined;
  const reader = body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      const text = decoder.decode(value, { stream: true });
      let from = 0;
      for (let nl = text.indexOf("\n"); nl !== -1; nl = text.indexOf("\n", from)) {
        partial.push(text.slice(from, nl));
        from = nl + 1;
        let line = partial.join("");
        partial = [];
        partialChars = 0;
        if (line.endsWith("\r")) line = line.slice(0, -1);
        if (line === "") {
          if (data.length > 0) yield { id, data: data.join("\n") };
          data = [];
          dataChars = 0;
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon === -1 ? line : line.slice(0, colon);
        const value = colon === -1 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "data") {
          dataChars += value.length + 1;
          if (dataChars > maxMessageChars) throw tooLarge();
          data.push(value);
        } else if (field === "id") id = value;
      }
      if (from < text.length) {
        partial.push(text.slice(from));
        partialChars += text.length - from;
        if (partialChars > maxMessageChars) throw tooLarge();
      }
    }
  } finally {
    reader.releaseLock();
    await body.cancel().catch(() => {});
  }
}

export interface FollowOptions {
  /** Channel: `$logs`, `$errors`, a custom name; the default channel when undefined. */
  channel?: string;
  /** Replays stored events after this ID before going live. */
  lastEventId?: string;
  signal?: AbortSignal;
  /** Pause before reconnecting after the stream ends or the network fails (default 1 s). */
  retryMs?: number;
  /** Called once the first connection is open, when events from then on will be seen. */
  onOpen?: () => void;
  onEntry: (entry: StreamEntry) => void;
}

/**
 * Follows a source's stream until `signal` aborts. A stream that ends or breaks is reopened from the
 * last event seen; an error answer (unknown source, bad key) ends the loop with an ApiError.
 */
export async function followSource(client: ApiClient, source: string, options: FollowOptions): Promise<void> {
  let last = options.lastEventId;
  let opened = false;
  const retryMs = options.retryMs ?? 1000;
  while (!options.signal?.aborted) {
    let res: Response;
    try {
      res = await client.fetch("GET", `/sources/${encodeURIComponent(source)}/sse`, {
        query: { event_name: options.channel },
        headers: { accept: "text/event-stream", ...(last ? { "last-event-id": last } : {}) },
        // A stream has no end to wait for.
        timeoutMs: 0,
        signal: options.signal,
      });
    } catch (err) {
      if ((err as Error).name === "AbortError") return;
      if (err instanceof ApiError && err.code === "network_error" && opened) {
        await pause(retryMs, options.signal);
        continue;
      }
      throw err;
    }
    if (!res.ok) throw await errorOf(res);
    if (!opened) {
      opened = true;
      options.onOpen?.();
    }
    try {
      for await (const message of readSse(res.body!)) {
        let entry: StreamEntry;
        try {
          entry = JSON.parse(message.data) as StreamEntry;
        } catch {
          continue;
        }
        last = message.id ?? entry.id ?? last;
        options.onEntry(entry);
      }
    } catch (err) {
      if ((err as Error).name === "AbortError" || options.signal?.aborted) return;
      // A stream past the limits is the server's fault: reopening would only read it again.
      if (err instanceof ApiError) throw err;
      // The connection broke: reopen from the last event seen.
    }
    await pause(retryMs, options.signal);
  }
}

async function errorOf(res: Response): Promise<ApiError> {
  const text = await errorText(res);
  try {
    const body = JSON.parse(text) as { error?: unknown; code?: unknown };
    if (typeof body.error === "string")
      return new ApiError(
        body.error,
        typeof body.code === "string" ? body.code : `http_${res.status}`,
        res.status,
      );
  } catch {
    // Not JSON: described below.
  }
  return new ApiError(
    `The stream answered ${res.status} ${res.statusText}`.trim(),
    `http_${res.status}`,
    res.status,
  );
}

function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** Orders event IDs `<ms>-<seq>` numerically. */
export function compareEventIds(a: string, b: string): number {
  const [am = 0, as = 0] = a.split("-").map(Number);
  const [bm = 0, bs = 0] = b.split("-").map(Number);
  return am - bm || as - bs;
}

/** Resolves when the user presses Ctrl-C (SIGINT) or the process is asked to stop (SIGTERM). */
export function untilInterrupted(): { signal: AbortSignal; dispose: () => void } {
  const controller = new AbortController();
  const stop = () => controller.abort();
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
  return {
    signal: controller.signal,
    dispose: () => {
      process.off("SIGINT", stop);
      process.off("SIGTERM", stop);
    },
  };
}
