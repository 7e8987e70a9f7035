/** Standard Webhooks signatures: `v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`. */
import { createHmac, createSecretKey, type KeyObject, timingSafeEqual } from "node:crypto";
import { BoundedCache } from "../bounded-cache.ts";

/** HMAC keys by secret: building the key for every message cost five times the HMAC itself. */
const keys = new BoundedCache<string, KeyObject>(1_000);

/** The HMAC key of a `whsec_<base64>` secret: the base64-decoded part after the prefix. */
export function signingKey(secret: string): KeyObject {
  return keys.getOrSet(secret, () =>
    createSecretKey(
      Buffer.from(secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret, "base64"),
    ),
  );
}

/** The `webhook-signature` header value for one message. */
export function signPayload(secret: string, id: string, timestampSeconds: number, body: string): string {
  const mac = createHmac("sha256", signingKey(secret))
    .update(`${id}.${timestampSeconds}.${body}`)
    .digest("base64");
  return `v1,${mac}`;
}

/** Seconds a delivery's `webhook-timestamp` may differ from the receiver's clock (Standard Webhooks' 5 min). */
export const signatureToleranceSeconds = 300;

/**
 * Whether `header` (`webhook-signature`: space-separated `v1,<base64>` entries) holds this message's
 * signature under `secret`, and its timestamp is within the tolerance of `nowSeconds`.
 */
export function verifySignature(
  secret: string,
  id: string,
  timestamp: string,
  body: string,
  header: string,
  nowSeconds = Math.floor(Date.now() / 1000),
): boolean {
  const seconds = Number(timestamp);
  if (!/^\d+$/.test(timestamp) || Math.abs(nowSeconds - seconds) > signatureToleranceSeconds) return false;
  const expected = Buffer.from(signPayload(secret, id, seconds, body));
  return header.split(" ").some((candidate) => {
    const given = Buffer.from(candidate);
    return given.length === expected.length && timingSafeEqual(given, expected);
  });
}
