/**
 * Console sessions (migration 010): one row per sign-in, found by the ID its sealed cookie carries.
 * Nothing is cached: a session ended through any node must stop working on every node at once, and
 * the lookup is one probe of a unique index, as an API key's is.
 */
import type { SessionOps } from "../concerns.ts";
import { sessionWithUserColumns, toSession, toSessionWithUser } from "../rows.ts";
import type { Sql } from "./sql.ts";

export function sessionOps(q: Sql): SessionOps {
  return {
    insertSession: async (s) => {
      await q.run(
        `INSERT INTO sessions (id, user_id, created_at, expires_at, address, user_agent)
         VALUES ($1, $2, $3, $4, $5, $6)`,
        [s.id, s.userId, s.createdAt, s.expiresAt, s.address, s.userAgent],
      );
    },

    findSession: (id, now) =>
      q.get(
        `SELECT ${sessionWithUserColumns} FROM sessions s JOIN users u ON u.id = s.user_id
         WHERE s.id = $1 AND s.expires_at > $2`,
        [id, now],
        toSessionWithUser,
        "find-session",
      ),

    listSessions: (userId, now) =>
      q.all(
        "SELECT * FROM sessions WHERE user_id = $1 AND expires_at > $2 ORDER BY seq DESC",
        [userId, now],
        toSession,
      ),

    deleteSession: async (userId, id) =>
      (await q.run("DELETE FROM sessions WHERE id = $1 AND user_id = $2", [id, userId])) > 0,

    trimSessions: (userId, keep) =>
      q.run(
        `DELETE FROM sessions WHERE user_id = $1 AND seq NOT IN
           (SELECT seq FROM sessions WHERE user_id = $1 ORDER BY seq DESC LIMIT $2)`,
        [userId, keep],
      ),

    pruneSessions: (now) => q.run("DELETE FROM sessions WHERE expires_at <= $1", [now]),
  };
}
