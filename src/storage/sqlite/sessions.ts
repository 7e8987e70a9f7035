/**
 * Console sessions (migration 010) in the SQLite store: one row per sign-in, found by the ID its sealed
 * cookie carries. Not cached, like API keys: ending a session must take effect on the next request.
 * `SqliteOps` delegates here, as to node-ops.ts.
 */
import type { SessionRecord, User } from "../../domain/types.ts";
import { sessionWithUserColumns, toSession, toSessionWithUser } from "../rows.ts";
import type { SqlHelpers } from "./delivery-ops.ts";
import { limitParam } from "./rows.ts";

export class SqliteSessionOps {
  readonly #q: SqlHelpers;

  constructor(helpers: SqlHelpers) {
    this.#q = helpers;
  }

  insertSession(s: SessionRecord): void {
    this.#q.run(
      "INSERT INTO sessions (id, user_id, created_at, expires_at, address, user_agent) VALUES (?, ?, ?, ?, ?, ?)",
      [s.id, s.userId, s.createdAt, s.expiresAt, s.address, s.userAgent],
    );
  }

  findSession(id: string, now: number): { session: SessionRecord; user: User } | undefined {
    return this.#q.get(
      `SELECT ${sessionWithUserColumns} FROM sessions s JOIN users u ON u.id = s.user_id
       WHERE s.id = ? AND s.expires_at > ?`,
      [id, now],
      toSessionWithUser,
    );
  }

  listSessions(userId: string, now: number): SessionRecord[] {
    return this.#q.all(
      "SELECT * FROM sessions WHERE user_id = ? AND expires_at > ? ORDER BY seq DESC",
      [userId, now],
      toSession,
    );
  }

  deleteSession(userId: string, id: string): boolean {
    return this.#q.run("DELETE FROM sessions WHERE id = ? AND user_id = ?", [id, userId]) > 0;
  }

  trimSessions(userId: string, keep: number): number {
    return this.#q.run(
      `DELETE FROM sessions WHERE user_id = ? AND seq NOT IN
         (SELECT seq FROM sessions WHERE user_id = ? ORDER BY seq DESC ${limitParam})`,
      [userId, userId, keep],
    );
  }

  pruneSessions(now: number): number {
    return this.#q.run("DELETE FROM sessions WHERE expires_at <= ?", [now]);
  }
}
