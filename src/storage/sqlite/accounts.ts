/**
 * Users, organizations, memberships, API keys and daily usage counters. Users are cached (row-cache.ts:
 * never updated or deleted), and so are live keys and each user's organizations, forgotten by every
 * write to keys or memberships (and by driver.ts when another connection wrote); usage additions inside
 * a transaction are summed and made once per user and day before COMMIT (deferred.ts).
 */
import type { OrgRole, Usage } from "../../domain/types.ts";
import type { AccountOps } from "../concerns.ts";
import { deepFreeze, toKey, toOrg, toUser, withSeq } from "../rows.ts";
import type { DeferredWrites } from "./deferred.ts";
import type { RowCache } from "./row-cache.ts";
import type { Row } from "./rows.ts";
import type { Sql } from "./sql.ts";

/** Adds to a user's usage of a day now (deferred.ts calls it, inside a transaction at COMMIT). */
export function writeUsage(q: Sql, userId: string, day: string, d: Usage): void {
  q.run(
    `INSERT INTO usage_daily (user_id, day, invocations, compute_ms, stored_bytes) VALUES (?, ?, ?, ?, ?)
       ON CONFLICT (user_id, day) DO UPDATE SET invocations = invocations + excluded.invocations,
       compute_ms = compute_ms + excluded.compute_ms, stored_bytes = stored_bytes + excluded.stored_bytes`,
    [userId, day, d.invocations, d.computeMs, d.storedBytes],
  );
}

export function accountOps(q: Sql, rows: RowCache, held: DeferredWrites): AccountOps {
  return {
    countUsers: async () => q.count("SELECT count(*) AS n FROM users", []),

    insertUser: async (u) => {
      q.run(
        "INSERT INTO users (id, username, email, plan, is_admin, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [u.id, u.username, u.email, u.plan, u.isAdmin ? 1 : 0, u.createdAt, u.updatedAt],
      );
    },

    getUser: async (id) => {
      const cached = rows.users.get(id);
      if (cached) return cached;
      const user = q.get("SELECT * FROM users WHERE id = ?", [id], toUser);
      if (user) rows.users.set(id, deepFreeze(user));
      return user;
    },

    getUserByUsername: async (username) =>
      q.get("SELECT * FROM users WHERE username = ?", [username], toUser),

    insertOrg: async (o) => {
      q.run(
        "INSERT INTO orgs (id, orgname, name, email, owner_id, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [o.id, o.orgname, o.name, o.email, o.ownerId, o.createdAt, o.updatedAt],
      );
    },

    getOrg: async (id) => q.get("SELECT * FROM orgs WHERE id = ?", [id], toOrg),

    getOrgByName: async (orgname) => q.get("SELECT * FROM orgs WHERE orgname = ?", [orgname], toOrg),

    putMember: async (orgId, userId, role, at) => {
      rows.orgsOfUser.clear();
      q.run(
        "INSERT INTO org_members (org_id, user_id, role, created_at) VALUES (?, ?, ?, ?) ON CONFLICT (org_id, user_id) DO UPDATE SET role = excluded.role",
        [orgId, userId, role, at],
      );
    },

    deleteMember: async (orgId, userId) => {
      rows.orgsOfUser.clear();
      return q.run("DELETE FROM org_members WHERE org_id = ? AND user_id = ?", [orgId, userId]) > 0;
    },

    listOrgsOfUser: async (userId) =>
      rows.orgsOfUser.getOrSet(userId, () =>
        deepFreeze(
          q.all(
            "SELECT o.* FROM orgs o JOIN org_members m ON m.org_id = o.id WHERE m.user_id = ? ORDER BY o.seq",
            [userId],
            toOrg,
          ),
        ),
      ),

    // The admin lists of users and organizations: newest first, paged by seq like every list.
    listUsers: async (page) => q.page("users", "1 = 1", [], page, withSeq(toUser)),

    listOrgs: async (page) => q.page("orgs", "1 = 1", [], page, withSeq(toOrg)),

    listMembers: async (orgId) =>
      q.all("SELECT user_id, role FROM org_members WHERE org_id = ? ORDER BY created_at", [orgId], (r) => ({
        userId: r.user_id as string,
        role: r.role as OrgRole,
      })),

    insertApiKey: async (k) => {
      q.run(
        "INSERT INTO api_keys (id, user_id, name, prefix, hash, created_at, revoked_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [k.id, k.userId, k.name, k.prefix, k.hash, k.createdAt, k.revokedAt],
      );
    },

    findApiKeyByHash: async (hash) => {
      const cached = rows.keys.get(hash);
      if (cached) return cached;
      const row = q
        .prepare(
          `SELECT k.id AS k_id, k.user_id, k.name AS k_name, k.prefix, k.hash, k.created_at AS k_created_at, k.revoked_at,
              u.* FROM api_keys k JOIN users u ON u.id = k.user_id WHERE k.hash = ? AND k.revoked_at IS NULL`,
        )
        .get(hash) as Row | undefined;
      if (!row) return undefined;
      const found = deepFreeze({
        key: toKey({ ...row, id: row.k_id, name: row.k_name, created_at: row.k_created_at }),
        user: toUser(row),
      });
      rows.keys.set(hash, found);
      return found;
    },

    listApiKeys: async (userId) =>
      q.all("SELECT * FROM api_keys WHERE user_id = ? ORDER BY seq DESC", [userId], toKey),

    revokeApiKey: async (id, at) => {
      rows.keys.clear();
      return q.run("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", [at, id]) > 0;
    },

    getUsage: async (userId, day) => {
      held.settle();
      return (
        q.get(
          "SELECT invocations, compute_ms, stored_bytes FROM usage_daily WHERE user_id = ? AND day = ?",
          [userId, day],
          (r) => ({
            invocations: r.invocations as number,
            computeMs: r.compute_ms as number,
            storedBytes: r.stored_bytes as number,
          }),
        ) ?? { invocations: 0, computeMs: 0, storedBytes: 0 }
      );
    },

    // Inside a transaction, one write per user and day carries the sum of its additions (deferred.ts).
    addUsage: async (userId, day, d) => held.addUsage(userId, day, d),

    reserveInvocation: async (userId, day, limits) => {
      held.settle();
      return (
        q.run(
          `INSERT INTO usage_daily (user_id, day, invocations, compute_ms)
           SELECT ?1, ?2, 1, 0 WHERE ?3 > 0 AND ?4 > 0 AND ?5 > 0
         ON CONFLICT (user_id, day) DO UPDATE SET invocations = invocations + 1
           WHERE invocations < ?3 AND compute_ms < ?4 AND stored_bytes < ?5`,
          [userId, day, limits.invocations, limits.computeMs, limits.storedBytes],
        ) > 0
      );
    },
  };
}
