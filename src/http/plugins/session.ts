/**
 * Console sessions: the browser holds an HttpOnly cookie that carries a sealed, expiring token around a
 * fresh API key made at sign-in (named "console session"). Sign-out revokes that key, so a session ends
 * on every node at once and needs no table of its own. Page scripts never see the key.
 */
import type { FastifyRequest } from "fastify";
import type { SecretBox } from "../../crypto/secret-box.ts";
import { AppError } from "../../errors.ts";

/** The cookie's name. */
export const sessionCookie = "fount_session";
/** The header every state-changing request made with the cookie must carry (see `sessionKey`). */
export const consoleHeader = "x-fount-console";
/** A session lasts a working day; signing in again gives a new one. */
export const sessionSeconds = 12 * 60 * 60;

/** The name of the API key behind a console session, as listed among a user's keys. */
export const sessionKeyName = "console session";

/** The value of one cookie in a Cookie header, or undefined. */
export function readCookie(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(";")) {
    const eq = part.indexOf("=");
    if (eq < 0) continue;
    if (part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/** The cookie value for a key secret: sealed with the server's key, with its expiry inside. */
export function sealSession(secrets: SecretBox, apiKey: string, nowMs: number): string {
  return secrets.seal(JSON.stringify({ k: apiKey, e: Math.floor(nowMs / 1000) + sessionSeconds }));
}

/** The API key inside a session cookie, or undefined when there is none or it is forged or expired. */
export function openSession(
  secrets: SecretBox,
  cookie: string | undefined,
  nowMs: number,
): string | undefined {
  if (!cookie || cookie.length > 1024) return undefined;
  try {
    const token = JSON.parse(secrets.open(cookie)) as { k?: unknown; e?: unknown };
    if (typeof token.k !== "string" || typeof token.e !== "number") return undefined;
    return token.e > nowMs / 1000 ? token.k : undefined;
  } catch {
    return undefined;
  }
}

const safeMethods = new Set(["GET", "HEAD", "OPTIONS"]);

/**
 * The API key of the request's session cookie, for the auth hook. A state-changing request that relies on
 * the cookie must carry the console header: a cross-site page cannot add a custom header without a CORS
 * preflight, which Fount never grants, so a forged form post or fetch is refused (SameSite=Strict is the
 * first guard, this the second).
 */
export function sessionKey(request: FastifyRequest, secrets: SecretBox, nowMs: number): string | undefined {
  const key = openSession(secrets, readCookie(request.headers.cookie, sessionCookie), nowMs);
  if (key === undefined) return undefined;
  if (!safeMethods.has(request.method) && request.headers[consoleHeader] !== "1") {
    throw new AppError(
      "csrf_rejected",
      `Requests signed in by cookie must send the ${consoleHeader}: 1 header`,
    );
  }
  return key;
}

/** The Set-Cookie value that stores a session, or (with no value) clears it. */
export function sessionSetCookie(value: string | undefined, secure: boolean): string {
  const parts = [
    `${sessionCookie}=${value ?? ""}`,
    "Path=/",
    "HttpOnly",
    "SameSite=Strict",
    `Max-Age=${value === undefined ? 0 : sessionSeconds}`,
  ];
  if (secure) parts.push("Secure");
  return parts.join("; ");
}
