/**
 * Many SSE streams on one source, held by a few client processes (bench/children/sse-clients.ts) so
 * that reading 1,000 sockets is not the bench's own bottleneck. The `sse` part and bench/compare-live.ts
 * open one each and read back, per event and stream, its arrival against the `emitted_at` it carries.
 */
import { benchApiKey, type HelperChild } from "./processes.ts";
import { pollUntil } from "./wait.ts";

/** What the streams saw since the last `reset`. */
export interface AudienceReport {
  clients: number;
  /** Streams still open. */
  open: number;
  /** Events received, per stream. */
  received: number[];
  /** Arrival minus the `emitted_at` the component stamped, per event and stream (ms). */
  emitLatencies: number[];
  /** Arrival minus the `sent_at` the load generator stamped (ms). */
  sendLatencies: number[];
}

export class SseAudience {
  readonly #children: HelperChild[];
  /** Streams that opened. */
  readonly connected: number;
  /** The first few errors of the streams that did not. */
  readonly openErrors: string[];
  /** How long opening took, in the slowest client process. */
  readonly openMs: number;

  private constructor(children: HelperChild[], connected: number, openErrors: string[], openMs: number) {
    this.#children = children;
    this.connected = connected;
    this.openErrors = openErrors;
    this.openMs = openMs;
  }

  /** Opens `count` streams of `url` (a `/sources/{id}/sse` URL), shared out between `children`. */
  static async open(children: HelperChild[], url: string, count: number): Promise<SseAudience> {
    const share = Math.ceil(count / children.length);
    const opened = await Promise.all(
      children.map((c, i) =>
        c.call<{ connected: number; errors: string[]; ms: number }>(
          "open",
          { url, key: benchApiKey, count: Math.max(0, Math.min(share, count - i * share)), concurrency: 25 },
          120_000,
        ),
      ),
    );
    return new SseAudience(
      children,
      opened.reduce((a, o) => a + o.connected, 0),
      opened.flatMap((o) => o.errors),
      Math.max(...opened.map((o) => o.ms)),
    );
  }

  async report(): Promise<AudienceReport> {
    const reports = await Promise.all(
      this.#children.map((c) => c.call<AudienceReport>("report", {}, 30_000)),
    );
    return {
      clients: reports.reduce((a, r) => a + r.clients, 0),
      open: reports.reduce((a, r) => a + r.open, 0),
      received: reports.flatMap((r) => r.received),
      emitLatencies: reports.flatMap((r) => r.emitLatencies),
      sendLatencies: reports.flatMap((r) => r.sendLatencies),
    };
  }

  /** Waits until every stream has `expected` events, or nothing moved for `quietMs`. */
  awaitFanOut(expected: number, quietMs: number): Promise<AudienceReport> {
    return pollUntil(() => this.report(), {
      done: (r) => r.received.every((n) => n >= expected),
      progress: (r) => r.received.reduce((a, b) => a + b, 0),
      quietMs,
      everyMs: 200,
    });
  }

  /** Forgets what was received so far. */
  async reset(): Promise<void> {
    await Promise.all(this.#children.map((c) => c.call("reset")));
  }

  async close(): Promise<void> {
    await Promise.all(this.#children.map((c) => c.call("close")));
  }
}
