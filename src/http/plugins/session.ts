/**
 * The console's session cookie. It carries a session's ID, its user and its expiry sealed with the
 * server's key (AES-256-GCM, the `SecretBox` that seals webhook secrets); the session itself is a row of
 * its user (domain/accounts/sessions.ts), so ending it there ends the cookie on every node. No API key is ever in
 * a cookie, and page scripts never see the cookie (HttpOnly).
 *
 * Sealed rather than a random token stored hashed: a forged, altered or expired cookie is refused by the
 * seal and the expiry inside it without a query, so made-up cookies cost nothing and are not guesses for
 * the throttle (auth-throttle.ts), while a cookie that opens was made by Fount and, if its session ended,
 * is a browser that is no longer signed in (401), not an attacker. A copy of the store alone cannot make
 * a cookie: the seal needs the encryption key, which every node holds already.
 */
import type { FastifyRequest } from "fastify";
import type { SecretBox } from "../../crypto/secret-box.ts";
import type { SessionRecord } from "../../domain/types.ts";
import { AppError } from "../../errors.ts";

/** The cookie's name over plain HTTP. */
export const sessionCookie = "fount_session";
/**
 * Its name when `PUBLIC_URL` is https: a browser keeps a `__Host-` cookie only if it was set over HTTPS
 * with `Secure`, `Path=/` and no `Domain`, so neither another host of the domain nor a plain-HTTP answer
 * can plant one (session fixation). Only this name is read then.
 */
export const secureSessionCookie = "__Host-fount_session";
/** The header every state-changing request made with the cookie must carry (see `csrfCheck`). */
export const consoleHeader = "x-fount-console";

/** What a session cookie names. */
export interface SessionToken {
  sessionId: string;
  userId: string;
  /** When the session expires (epoch seconds), sealed in: an expired cookie needs no lookup. */
  expiresAt: number;
}

/**
 * The value of one cookie in a Cookie header, or undefined: also when the name is there more than once.
 * A browser sends every cookie of that name it holds for the request (another path's, another host's of
 * the domain, a nameless one whose value reads `name=…`), the longest path first, and which is whose
 * cannot be told: a cookie planted to shadow the session must not choose whose session the request has.
 */
export function readCookie(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  let value: string | undefined;
  for (const part of header.split(";")) {
    const eq = part.indexOf("=");
    if (eq < 0 || part.slice(0, eq).trim() !== name) continue;
    if (value !== undefined) return undefined;
    value = part.slice(eq + 1).trim();
  }
  return value;
}

const safeMethods = new Set(["GET", "HEAD", "OPTIONS"]);

/** Reads and writes the session cookie of one server (its name and `Secure` follow `PUBLIC_URL`). */
export class SessionCookies {
  readonly #secrets: SecretBox;
  readonly #secure: boolean;
  readonly name: string;

  constructor(secrets: SecretBox, options: { secure: boolean }) {
    this.#secrets = secrets;
    this.#secure = options.secure;
    this.name = options.secure ? secureSessionCookie : sessionCookie;
  }

  /** The session the request's cookie names (expired or not), or undefined when there is none or it is forged. */
  read(request: FastifyRequest): SessionToken | undefined {
    const cookie = readCookie(request.headers.cookie, this.name);
    if (!cookie || cookie.length > 1024) return undefined;
    try {
      const token = JSON.parse(this.#secrets.open(cookie)) as { s?: unknown; u?: unknown; e?: unknown };
      // Cookies of the API-key sessions before migration 010 held `k`: they open to nothing here.
      if (typeof token.s !== "string" || typeof token.u !== "string" || typeof token.e !== "number")
        return undefined;
      return { sessionId: token.s, userId: token.u, expiresAt: token.e };
    } catch {
      return undefined;
    }
  }

  /** The Set-Cookie value that stores `session` in the browser until it expires. */
  set(session: SessionRecord): string {
    const sealed = this.#secrets.seal(
      JSON.stringify({ s: session.id, u: session.userId, e: session.expiresAt }),
    );
    return this.#attributes(sealed, session.expiresAt - session.createdAt);
  }

  /** The Set-Cookie value that clears the cookie. */
  clear(): string {
    return this.#attributes("", 0);
  }

  #attributes(value: string, maxAgeSeconds: number): string {
    const parts = [
      `${this.name}=${value}`,
      "Path=/",
      "HttpOnly",
      "SameSite=Strict",
      `Max-Age=${maxAgeSeconds}`,
    ];
    if (this.#secure) parts.push("Secure");
    return parts.join("; ");
  }
}

/**
 * Refuses a state-changing request signed in by the cookie that lacks the console header: a cross-site
 * page cannot add a custom header without a CORS preflight, which Fount never grants, so a forged form
 * post or fetch is refused (SameSite=Strict is the first guard, this the second).
 */
export function csrfCheck(request: FastifyRequest): void {
  if (!safeMethods.has(request.method) && request.headers[consoleHeader] !== "1") {
    throw new AppError(
      "csrf_rejected",
      `Requests signed in by cookie must send the ${consoleHeader}: 1 header`,
    );
  }
}
