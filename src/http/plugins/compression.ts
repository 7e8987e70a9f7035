/**
 * Compression of the answers Fastify sends (@fastify/compress): Brotli or gzip by the request's
 * Accept-Encoding, for the console's files, `/docs`, `/openapi.json`, `/metrics` and API JSON of 1 KB or
 * more (smaller answers gain less than the header costs). Register it before the routes: it sees them
 * through `onRoute`. Two kinds of answer never pass through it: SSE streams write to the socket
 * themselves (the reply is hijacked, so each frame leaves at once), and source endpoints (`/e/…`) are
 * answered before Fastify (routes/endpoints.ts), as the component wrote them.
 */
import compress from "@fastify/compress";
import type { FastifyInstance } from "fastify";

/** Answers smaller than this go as they are: below about a TCP packet, compression saves no round trip. */
export const compressionThresholdBytes = 1024;

export async function registerCompression(app: FastifyInstance): Promise<void> {
  await app.register(compress, {
    encodings: ["br", "gzip"],
    threshold: compressionThresholdBytes,
    // Brotli at the plugin's quality 4: close to gzip's speed, smaller output; 11 costs ~10x the CPU.
    // Request bodies are read as sent, as before: no Content-Encoding is decoded.
    globalDecompression: false,
  });
}
