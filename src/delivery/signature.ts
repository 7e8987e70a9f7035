/** Standard Webhooks signatures: `v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`. */
import { createHmac, createSecretKey, type KeyObject } from "node:crypto";

/** HMAC keys by secret: building the key for every message cost five times the HMAC itself. */
const keys = new Map<string, KeyObject>();

/** The HMAC key of a `whsec_<base64>` secret: the base64-decoded part after the prefix. */
export function signingKey(secret: string): KeyObject {
  let key = keys.get(secret);
  if (!key) {
    key = createSecretKey(
      Buffer.from(secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret, "base64"),
    );
    if (keys.size >= 1_000) keys.clear();
    keys.set(secret, key);
  }
  return key;
}

/** The `webhook-signature` header value for one message. */
export function signPayload(secret: string, id: string, timestampSeconds: number, body: string): string {
  const mac = createHmac("sha256", signingKey(secret))
    .update(`${id}.${timestampSeconds}.${body}`)
    .digest("base64");
  return `v1,${mac}`;
}
