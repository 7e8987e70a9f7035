/**
 * Following a source's live stream (`GET /sources/{id}/sse`) from the CLI: a small Server-Sent Events
 * reader and a loop that reconnects with the last event ID, so that a dropped connection loses nothing.
 */
import { type ApiClient, ApiError } from "./client.ts";

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

/** Splits an SSE body into messages; comment lines (`:keepalive`) and unknown fields are skipped. */
export async function* readSse(body: ReadableStream<Uint8Array>): AsyncGenerator<SseMessage> {
  const decoder = new TextDecoder();
  let buffer = "";
  let data: string[] = [];
  let id: string | undefined;
  const reader = body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let nl = buffer.search(/\r?\n/);
      while (nl !== -1) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(buffer[nl] === "\r" ? nl + 2 : nl + 1);
        nl = buffer.search(/\r?\n/);
        if (line === "") {
          if (data.length > 0) yield { id, data: data.join("\n") };
          data = [];
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon === -1 ? line : line.slice(0, colon);
        const value = colon === -1 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "data") data.push(value);
        else if (field === "id") id = value;
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
      // The connection broke: reopen from the last event seen.
    }
    await pause(retryMs, options.signal);
  }
}

async function errorOf(res: Response): Promise<ApiError> {
  const text = await res.text().catch(() => "");
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
