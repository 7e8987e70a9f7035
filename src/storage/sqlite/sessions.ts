/**
 * Console sessions (migration 010) in the SQLite store: one row per sign-in, found by the ID its sealed
 * cookie carries. Not cached, like API keys: ending a session must take effect on the next request.
 */
import type { SessionOps } from "../concerns.ts";
import { sessionWithUserColumns, toSession, toSessionWithUser } from "../rows.ts";
import { limitParam } from "./rows.ts";
import type { Sql } from "./sql.ts";

export function sessionOps(q: Sql): SessionOps {
  return {
    insertSession: async (s) => {
      q.run(
        "INSERT INTO sessions (id, user_id, created_at, expires_at, address, user_agent) VALUES (?, ?, ?, ?, ?, ?)",
        [s.id, s.userId, s.createdAt, s.expiresAt, s.address, s.userAgent],
      );
    },

    findSession: async (id, now) =>
      q.get(
        `SELECT ${sessionWithUserColumns} FROM sessions s JOIN users u ON u.id = s.user_id
       WHERE s.id = ? AND s.expires_at > ?`,
        [id, now],
        toSessionWithUser,
      ),

    listSessions: async (userId, now) =>
      q.all(
        "SELECT * FROM sessions WHERE user_id = ? AND expires_at > ? ORDER BY seq DESC",
        [userId, now],
        toSession,
      ),

    deleteSession: async (userId, id) =>
      q.run("DELETE FROM sessions WHERE id = ? AND user_id = ?", [id, userId]) > 0,

    trimSessions: async (userId, keep) =>
      q.run(
        `DELETE FROM sessions WHERE user_id = ? AND seq NOT IN
         (SELECT seq FROM sessions WHERE user_id = ? ORDER BY seq DESC ${limitParam})`,
        [userId, userId, keep],
      ),

    pruneSessions: async (now) => q.run("DELETE FROM sessions WHERE expires_at <= ?", [now]),
  };
}
