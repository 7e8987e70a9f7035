/**
 * What an attempt records besides its result (docs/delivery.md, "Attempts"): the answer's body up to a
 * bound, the error in words and its kind (DNS, TLS, timeout, refused…), and the detail of an attempt
 * that made no HTTP request (a source listener's run).
 */
import type { AttemptDetail, AttemptErrorKind, ListenerKind } from "../domain/types.ts";
import type { AttemptOutcome } from "./outcome.ts";

/**
 * Bytes of an answer's body kept with its attempt: enough for the error pages and JSON answers that
 * explain a failure, bounded so that a receiver answering megabytes cannot fill the store (finished
 * deliveries are kept 7 days). It is also all that is read of an answer.
 */
export const attemptResponseBytes = 64 * 1024;

/**
 * Bytes of a successful attempt's answer kept: a success needs no explaining, and most deliveries
 * succeed, so keeping 64 KB of each filled the store fastest (40 webhooks answering 64 KB wrote 2.5 GB in
 * 28 s); 4 KiB still shows what a receiver acknowledged with.
 */
export const successResponseBytes = 4 * 1024;

/**
 * Characters of an answer's body the deliveries lists show per attempt (`GET /v1/webhooks/{id}/deliveries`),
 * as much as was kept at all before answers were kept up to 64 KB.
 */
export const listedResponseChars = 512;

/**
 * Text safe to store in either driver: PostgreSQL's `text` refuses U+0000, which a receiver may well
 * answer with (a binary body read as UTF-8) and a listener source may throw, so it becomes U+FFFD as in
 * channel names; so does an unpaired surrogate (a run's error cut inside an emoji, or thrown so), which
 * no UTF-8 text holds and PostgreSQL's jsonb refuses in a first attempt kept as JSON (attempt-rows.ts).
 */
export function storableText(text: string): string {
  const kept = text.includes("\u0000") ? text.replaceAll("\u0000", "\uFFFD") : text;
  return kept.toWellFormed();
}

/** A network error of an attempt in words, and its kind, from Node's and undici's error codes. */
export function describeNetworkError(
  err: Error & { code?: string },
  url: URL,
): { error: string; kind: AttemptErrorKind } {
  const code = err.code ?? "";
  const where = url.host;
  const tagged = (text: string) => `${text} (${code || err.message})`;
  if (code === "ENOTFOUND") return { kind: "dns", error: tagged(`DNS: ${url.hostname} does not resolve`) };
  if (code === "EAI_AGAIN" || code === "ESERVFAIL" || code === "ENODATA")
    return { kind: "dns", error: tagged(`DNS: the lookup of ${url.hostname} failed`) };
  if (code === "ECONNREFUSED")
    return { kind: "refused", error: tagged(`connection refused: nothing accepts connections at ${where}`) };
  if (code === "ECONNRESET" || code === "EPIPE" || code === "UND_ERR_SOCKET")
    return { kind: "reset", error: tagged(`connection closed by ${where} before it answered`) };
  if (
    code === "UND_ERR_CONNECT_TIMEOUT" ||
    code === "ETIMEDOUT" ||
    code === "UND_ERR_HEADERS_TIMEOUT" ||
    code === "UND_ERR_BODY_TIMEOUT"
  )
    return { kind: "timeout", error: tagged(`timeout: ${where} did not answer in time`) };
  if (isTlsCode(code)) return { kind: "tls", error: tagged(`TLS: ${err.message}`) };
  if (code === "EHOSTUNREACH" || code === "ENETUNREACH")
    return { kind: "network", error: tagged(`network: ${where} cannot be reached`) };
  return { kind: "network", error: `network error: ${code ? `${code} ` : ""}${err.message}` };
}

/** Node's and OpenSSL's codes of a TLS handshake or certificate that failed. */
function isTlsCode(code: string): boolean {
  return (
    code.startsWith("ERR_TLS_") ||
    code.startsWith("ERR_SSL_") ||
    code.startsWith("CERT_") ||
    code === "EPROTO" ||
    code === "UNABLE_TO_VERIFY_LEAF_SIGNATURE" ||
    code === "UNABLE_TO_GET_ISSUER_CERT" ||
    code === "UNABLE_TO_GET_ISSUER_CERT_LOCALLY" ||
    code === "DEPTH_ZERO_SELF_SIGNED_CERT" ||
    code === "SELF_SIGNED_CERT_IN_CHAIN" ||
    code === "HOSTNAME_MISMATCH"
  );
}

/**
 * The detail an attempt is stored with: the HTTP deliverer's, or for an attempt that sent no request (a
 * source listener's run, a delivery that could not be prepared) none of the request's fields, and the
 * run as the error's kind when it failed.
 */
export function attemptDetailOf(
  outcome: Exclude<AttemptOutcome, { kind: "release" }>,
  listenerKind: ListenerKind,
): AttemptDetail {
  if (outcome.detail) return outcome.detail;
  return {
    url: null,
    requestHeaders: null,
    responseHeaders: null,
    responseTruncated: false,
    errorKind: outcome.kind === "succeeded" ? null : listenerKind === "source" ? "run" : "internal",
  };
}
