/**
 * Console sessions: a sign-in is a row of its user in the store, not an extra API key, so it expires,
 * is listed and revoked by its user and by an admin, and one user holds at most `maxSessionsPerUser`.
 * The cookie that names a session is made and read in http/plugins/session.ts; this holds the records.
 */
import type { Clock } from "../../clock.ts";
import { notFound } from "../../errors.ts";
import { newId } from "../../ids.ts";
import type { Storage } from "../../storage/port.ts";
import type { Principal, SessionRecord } from "../types.ts";

/** A session lasts a working day; signing in again gives a new one. */
export const sessionSeconds = 12 * 60 * 60;

/**
 * Sessions one user may hold at once: a browser on each of their machines and some left signed in,
 * with room to spare. A sign-in past it ends that user's oldest sessions, so a script signing in over
 * and over keeps at most this many rows.
 */
export const maxSessionsPerUser = 20;

/**
 * How often each node deletes expired sessions. An expired row is refused by its expiry whether or not
 * it was deleted, so this only bounds the table; the delete walks the expiry index and nodes doing it
 * at once do no harm.
 */
export const sessionSweepMs = 10 * 60_000;

/** The most of a User-Agent kept with a session (it is shown to tell sessions apart, nothing more). */
const userAgentChars = 256;

/** Where a sign-in came from, kept with its session. */
export interface SignInOrigin {
  address?: string;
  userAgent?: string;
}

export class Sessions {
  readonly #store: Storage;
  readonly #clock: Clock;
  readonly #maxPerUser: number;
  #sweeper: NodeJS.Timeout | undefined;

  constructor(store: Storage, clock: Clock, options: { maxPerUser?: number } = {}) {
    this.#store = store;
    this.#clock = clock;
    this.#maxPerUser = options.maxPerUser ?? maxSessionsPerUser;
  }

  #now(): number {
    return Math.floor(this.#clock.now() / 1000);
  }

  /** A new session of `userId`; the user's oldest sessions past the cap end with it. */
  start(userId: string, origin: SignInOrigin = {}): Promise<SessionRecord> {
    return this.#store.transaction(async (tx) => {
      // Sign-ins of one user through several nodes at once each trim after the others' inserts.
      await tx.acquireTransactionLock(`sessions:${userId}`);
      const now = this.#now();
      const session: SessionRecord = {
        id: newId("ses"),
        userId,
        createdAt: now,
        expiresAt: now + sessionSeconds,
        address: origin.address ?? null,
        userAgent: origin.userAgent?.slice(0, userAgentChars) ?? null,
      };
      await tx.insertSession(session);
      await tx.trimSessions(userId, this.#maxPerUser);
      return session;
    });
  }

  /** The principal of a live session of `userId`, or undefined when it ended or expired. */
  async authenticate(userId: string, id: string): Promise<Principal | undefined> {
    const found = await this.#store.findSession(id, this.#now());
    if (!found || found.user.id !== userId) return undefined;
    const orgs = await this.#store.listOrgsOfUser(found.user.id);
    return { user: found.user, credential: { kind: "session", id }, orgIds: orgs.map((o) => o.id) };
  }

  /** A user's live sessions, newest first. */
  list(userId: string): Promise<SessionRecord[]> {
    return this.#store.listSessions(userId, this.#now());
  }

  /** Ends a session of `userId`; returns whether that user had it. */
  end(userId: string, id: string): Promise<boolean> {
    return this.#store.deleteSession(userId, id);
  }

  /** Ends a session of `userId`; 404 when that user has no such session (another user's included). */
  async revoke(userId: string, id: string): Promise<void> {
    if (!(await this.end(userId, id))) throw notFound("Session", id);
  }

  /** Deletes expired sessions; returns how many. */
  sweep(): Promise<number> {
    return this.#store.pruneSessions(this.#now());
  }

  /** Sweeps every `sessionSweepMs` until `stop`; a failed sweep goes to `onError` and waits for the next. */
  startSweeping(onError: (err: unknown) => void): void {
    this.#sweeper ??= setInterval(() => {
      this.sweep().catch(onError);
    }, sessionSweepMs).unref();
  }

  stop(): void {
    clearInterval(this.#sweeper);
    this.#sweeper = undefined;
  }
}
