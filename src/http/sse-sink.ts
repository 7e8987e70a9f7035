/**
 * Where the stream hub writes an SSE response: straight to its socket, each write framed as one HTTP/1.1
 * chunk. The hub writes the same bytes (one batch of a channel's events) to every client of the
 * channel; `ServerResponse.write` would frame them again for each client, as four buffers, and uncork
 * the socket a tick later. Here the framed chunk is made once and shared, and each client costs one
 * socket write. The response's own `end()` still writes the closing chunk, after everything written here.
 */
import type { ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { StreamSink } from "../domain/events/stream-hub.ts";

const crlf = Buffer.from("\r\n");

function frame(data: Buffer): Buffer {
  return Buffer.concat([Buffer.from(`${data.length.toString(16)}\r\n`, "latin1"), data, crlf]);
}

/**
 * The last buffer framed and its chunk: the hub writes one batch to every client in a row, so one entry
 * finds it for all but the first. It keeps that batch alive until the next one, whatever its size.
 */
let lastData: Buffer | undefined;
let lastChunk: Buffer = crlf;

function chunkOf(data: Buffer | string): Buffer {
  if (typeof data === "string") return frame(Buffer.from(data));
  if (data !== lastData) {
    lastChunk = frame(data);
    lastData = data;
  }
  return lastChunk;
}

/**
 * The sink of one SSE response, or the response itself when it has no socket of its own yet (a request
 * pipelined behind another on its connection, whose answer Node holds until the earlier one ends).
 */
export function sseSink(res: ServerResponse): StreamSink {
  return res.socket ? new SocketSink(res, res.socket) : res;
}

class SocketSink implements StreamSink {
  readonly #res: ServerResponse;
  readonly #socket: Socket;
  /** Set by the first write, once the route has written the head: HTTP/1.0 clients get no chunks. */
  #chunked: boolean | undefined;

  constructor(res: ServerResponse, socket: Socket) {
    this.#res = res;
    this.#socket = socket;
  }

  write(data: Buffer | string): boolean {
    if (this.#chunked === undefined) {
      // The head goes out now, before the first chunk written past the response.
      this.#res.flushHeaders();
      this.#chunked = this.#res.chunkedEncoding;
    }
    // An empty chunk would end the body.
    if (data.length === 0) return true;
    return this.#socket.write(this.#chunked ? chunkOf(data) : data);
  }

  end(): void {
    this.#res.end();
  }

  destroy(): void {
    this.#res.destroy();
  }

  cork(): void {
    this.#socket.cork();
  }

  uncork(): void {
    this.#socket.uncork();
  }

  get destroyed(): boolean {
    return this.#res.destroyed || this.#socket.destroyed;
  }

  get writableEnded(): boolean {
    return this.#res.writableEnded;
  }

  on(event: "drain" | "close" | "error", listener: () => void): this {
    // The response closes with its socket; drains and write errors are the socket's.
    (event === "close" ? this.#res : this.#socket).on(event, listener);
    return this;
  }

  once(event: "close", listener: () => void): this {
    this.#res.once(event, listener);
    return this;
  }

  off(event: "drain", listener: () => void): this {
    this.#socket.off(event, listener);
    return this;
  }
}
