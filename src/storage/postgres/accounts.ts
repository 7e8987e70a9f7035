/** Users, organizations, memberships, API keys and daily usage counters. */
import type { OrgRole, Usage } from "../../domain/types.ts";
import type { AccountOps } from "../concerns.ts";
import { toKey, toOrg, toUser, withSeq } from "../rows.ts";
import type { Sql } from "./sql.ts";

export function accountOps(q: Sql): AccountOps {
  return {
    countUsers: async () => (await q.get("SELECT count(*) AS n FROM users", [], (r) => r.n as number)) ?? 0,

    insertUser: async (u) => {
      await q.run(
        "INSERT INTO users (id, username, email, plan, is_admin, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        [u.id, u.username, u.email, u.plan, u.isAdmin, u.createdAt, u.updatedAt],
      );
    },

    getUser: (id) => q.get("SELECT * FROM users WHERE id = $1", [id], toUser),

    getUserByUsername: (username) => q.get("SELECT * FROM users WHERE username = $1", [username], toUser),

    insertOrg: async (o) => {
      await q.run(
        "INSERT INTO orgs (id, orgname, name, email, owner_id, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        [o.id, o.orgname, o.name, o.email, o.ownerId, o.createdAt, o.updatedAt],
      );
    },

    getOrg: (id) => q.get("SELECT * FROM orgs WHERE id = $1", [id], toOrg),

    getOrgByName: (orgname) => q.get("SELECT * FROM orgs WHERE orgname = $1", [orgname], toOrg),

    putMember: async (orgId, userId, role, at) => {
      await q.run(
        `INSERT INTO org_members (org_id, user_id, role, created_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (org_id, user_id) DO UPDATE SET role = excluded.role`,
        [orgId, userId, role, at],
      );
    },

    deleteMember: async (orgId, userId) =>
      (await q.run("DELETE FROM org_members WHERE org_id = $1 AND user_id = $2", [orgId, userId])) > 0,

    listOrgsOfUser: (userId) =>
      q.all(
        "SELECT o.* FROM orgs o JOIN org_members m ON m.org_id = o.id WHERE m.user_id = $1 ORDER BY o.seq",
        [userId],
        toOrg,
      ),

    listUsers: (page) => q.page("users", "TRUE", [], page, withSeq(toUser)),

    listOrgs: (page) => q.page("orgs", "TRUE", [], page, withSeq(toOrg)),

    listMembers: (orgId) =>
      q.all(
        "SELECT user_id, role FROM org_members WHERE org_id = $1 ORDER BY created_at, user_id",
        [orgId],
        (r) => ({ userId: r.user_id as string, role: r.role as OrgRole }),
      ),

    insertApiKey: async (k) => {
      await q.run(
        "INSERT INTO api_keys (id, user_id, name, prefix, hash, created_at, revoked_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        [k.id, k.userId, k.name, k.prefix, k.hash, k.createdAt, k.revokedAt],
      );
    },

    findApiKeyByHash: (hash) =>
      q.get(
        `SELECT k.id AS k_id, k.user_id, k.name AS k_name, k.prefix, k.hash, k.created_at AS k_created_at,
                k.revoked_at, u.*
         FROM api_keys k JOIN users u ON u.id = k.user_id WHERE k.hash = $1 AND k.revoked_at IS NULL`,
        [hash],
        (row) => ({
          key: toKey({ ...row, id: row.k_id, name: row.k_name, created_at: row.k_created_at }),
          user: toUser(row),
        }),
      ),

    listApiKeys: (userId) =>
      q.all("SELECT * FROM api_keys WHERE user_id = $1 ORDER BY seq DESC", [userId], toKey),

    revokeApiKey: async (id, at) =>
      (await q.run("UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL", [at, id])) > 0,

    getUsage: async (userId, day): Promise<Usage> =>
      (await q.get(
        "SELECT invocations, compute_ms, stored_bytes FROM usage_daily WHERE user_id = $1 AND day = $2",
        [userId, day],
        (r) => ({
          invocations: r.invocations as number,
          computeMs: r.compute_ms as number,
          storedBytes: r.stored_bytes as number,
        }),
      )) ?? { invocations: 0, computeMs: 0, storedBytes: 0 },

    // Additive in SQL, so that counts from several writers add up; inside a transaction one statement
    // per user and day carries the sum of its additions.
    addUsage: (userId, day, d) =>
      q.deferMerged(`usage\0${userId}\0${day}`, d, (deltas) => ({
        text: `INSERT INTO usage_daily (user_id, day, invocations, compute_ms, stored_bytes) VALUES ($1, $2, $3, $4, $5)
               ON CONFLICT (user_id, day) DO UPDATE SET invocations = usage_daily.invocations + excluded.invocations,
               compute_ms = usage_daily.compute_ms + excluded.compute_ms,
               stored_bytes = usage_daily.stored_bytes + excluded.stored_bytes`,
        params: [
          userId,
          day,
          deltas.reduce((n, x) => n + x.invocations, 0),
          deltas.reduce((n, x) => n + x.computeMs, 0),
          deltas.reduce((n, x) => n + x.storedBytes, 0),
        ],
      })),

    // The check and the count in one statement: the row is locked by the upsert, so concurrent
    // reservations (of any node) queue and each sees the count the one before left.
    reserveInvocation: async (userId, day, limits) =>
      (await q.run(
        `INSERT INTO usage_daily AS u (user_id, day, invocations, compute_ms)
           SELECT $1, $2, 1, 0 WHERE $3::bigint > 0 AND $4::bigint > 0 AND $5::bigint > 0
         ON CONFLICT (user_id, day) DO UPDATE SET invocations = u.invocations + 1
           WHERE u.invocations < $3::bigint AND u.compute_ms < $4::bigint AND u.stored_bytes < $5::bigint`,
        [userId, day, limits.invocations, limits.computeMs, limits.storedBytes],
      )) > 0,
  };
}
