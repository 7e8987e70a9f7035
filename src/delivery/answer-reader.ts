/**
 * Reads the answer to one delivery's request as an undici dispatch handler: the status, the headers and
 * the body's first `attemptResponseBytes` as Buffers, settling one promise. It replaces `request()`'s
 * body stream, its promise per read and its abort listener per attempt, which cost as much CPU as the
 * request's write (docs/architecture.md, *Performance*).
 */
import type { Dispatcher } from "undici";
import { attemptResponseBytes } from "./attempt-record.ts";

/** What was read of an answer. */
export interface Answer {
  statusCode: number;
  headers: Record<string, string | string[]>;
  /** The kept start of the body, `bodyBytes` long. */
  body: Buffer[];
  bodyBytes: number;
  /** The body was longer than what was kept; the rest was dropped with the connection. */
  truncated: boolean;
}

/** Thrown into an answer cut at the bound, to close its connection; never seen by the sender. */
const cutReason = new Error("the answer was cut at its bound");

export class AnswerReader implements Dispatcher.DispatchHandler {
  readonly answer: Promise<Answer>;
  readonly #resolve: (a: Answer) => void;
  readonly #reject: (err: Error) => void;
  #controller: Dispatcher.DispatchController | null = null;
  /** Why the attempt was ended before undici started it (a timeout or a stop while connecting). */
  #reason: Error | null = null;
  #settled = false;
  #statusCode = 0;
  #headers: Record<string, string | string[]> = {};
  readonly #body: Buffer[] = [];
  #bodyBytes = 0;

  constructor() {
    const { promise, resolve, reject } = Promise.withResolvers<Answer>();
    this.answer = promise;
    this.#resolve = resolve;
    this.#reject = reject;
  }

  /** Ends the attempt with `reason` (a timeout, a stop): at once if started, else as soon as it starts. */
  abort(reason: Error): void {
    if (this.#settled) return;
    if (this.#controller) this.#controller.abort(reason);
    else this.#reason ??= reason;
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    if (this.#reason) controller.abort(this.#reason);
    else this.#controller = controller;
  }

  onResponseStart(
    _controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: Record<string, string | string[] | undefined>,
  ): void {
    // 1xx answers (100 Continue, 103 Early Hints) come before the real one.
    if (statusCode < 200) return;
    this.#statusCode = statusCode;
    this.#headers = headers as Record<string, string | string[]>;
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    const room = attemptResponseBytes - this.#bodyBytes;
    if (chunk.length <= room) {
      this.#body.push(chunk);
      this.#bodyBytes += chunk.length;
      return;
    }
    // Past the bound: keep what fits, answer now, and drop the rest with the connection.
    if (room > 0) this.#body.push(chunk.subarray(0, room));
    this.#bodyBytes += room;
    this.#settle(true);
    controller.abort(cutReason);
  }

  onResponseEnd(): void {
    this.#settle(false);
  }

  onResponseError(_controller: Dispatcher.DispatchController | null, err: Error): void {
    if (this.#settled) return;
    this.#settled = true;
    this.#reject(err);
  }

  #settle(truncated: boolean): void {
    if (this.#settled) return;
    this.#settled = true;
    this.#resolve({
      statusCode: this.#statusCode,
      headers: this.#headers,
      body: this.#body,
      bodyBytes: this.#bodyBytes,
      truncated,
    });
  }
}
