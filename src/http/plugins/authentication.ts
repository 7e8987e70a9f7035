/**
 * Who is calling. Every route that is not public needs `Authorization: Bearer <key>` or, without one,
 * the console's session cookie (session.ts); the console's sign-in checks the key it is given the same
 * way. Wrong keys go through the guess throttle (auth-throttle.ts), which never refuses a valid key or
 * session. The API rate limit then counts per user (`rateLimitKey`), whatever key or session they use.
 */
import type { FastifyRequest } from "fastify";
import type { Clock } from "../../clock.ts";
import { hashApiKey } from "../../crypto/secret-box.ts";
import type { Accounts } from "../../domain/accounts/accounts.ts";
import type { Sessions } from "../../domain/accounts/sessions.ts";
import type { Principal } from "../../domain/types.ts";
import { AppError } from "../../errors.ts";
import type { AuthThrottle } from "../auth-throttle.ts";
import { bearerToken } from "../conventions.ts";
import { csrfCheck, type SessionCookies } from "./session.ts";

export interface AuthenticatorOptions {
  accounts: Accounts;
  sessions: Sessions;
  cookies: SessionCookies;
  throttle: AuthThrottle;
  clock: Clock;
}

export class Authenticator {
  readonly #o: AuthenticatorOptions;

  constructor(options: AuthenticatorOptions) {
    this.#o = options;
  }

  get cookies(): SessionCookies {
    return this.#o.cookies;
  }

  /** The principal of a request to a route that needs one; throws 401, 403 `csrf_rejected` or 429. */
  async principal(request: FastifyRequest): Promise<Principal> {
    const key = bearerToken(request.headers.authorization);
    if (key) return this.key(request, key);
    const token = this.#o.cookies.read(request);
    if (!token) throw new AppError("unauthorized", "Send the API key as Authorization: Bearer <key>");
    csrfCheck(request);
    // A cookie that opens was made by this server; when its session ended (expired, signed out
    // elsewhere, revoked, past the cap) it is a browser no longer signed in, not a guess: the throttle
    // does not count it.
    const found = await this.session(request, token);
    if (!found) throw new AppError("unauthorized", "The console session has ended: sign in again");
    return found;
  }

  /** The principal of an API key sent from the request's client; throws 401 or 429 `auth_throttled`. */
  async key(request: FastifyRequest, key: string): Promise<Principal> {
    const { throttle, accounts } = this.#o;
    const keyHash = throttle.enabled ? hashApiKey(key) : "";
    const knownBadMs = throttle.knownBadMs(request.ip, keyHash);
    if (knownBadMs > 0) throw throttled(knownBadMs);
    const found = await accounts.authenticate(key);
    if (found) return found;
    const waitMs = throttle.failed(request.ip, keyHash);
    if (waitMs > 0) throw throttled(waitMs);
    throw new AppError("unauthorized", "Unknown or revoked API key");
  }

  /** The principal of the request's session cookie, or undefined (no cookie, or its session ended). */
  async session(
    request: FastifyRequest,
    token = this.#o.cookies.read(request),
  ): Promise<Principal | undefined> {
    if (!token || token.expiresAt <= this.#o.clock.now() / 1000) return undefined;
    return this.#o.sessions.authenticate(token.userId, token.sessionId);
  }
}

function throttled(waitMs: number): AppError {
  return new AppError("auth_throttled", undefined, {
    headers: { "retry-after": String(Math.ceil(waitMs / 1000)) },
  });
}

/**
 * What the API rate limit counts a request under: its user, whichever of their keys or sessions it
 * came with (every API key belongs to a user; an organization's resources are used with its members'
 * keys, each counting for its member). The auth hook runs before the limiter's (instance hooks run
 * before route hooks), so the principal is known; a request without one counts for its address.
 */
export function rateLimitKey(request: FastifyRequest): string {
  return request.principal ? `u:${request.principal.user.id}` : `ip:${request.ip}`;
}
