import type { AppAccountOps } from "../concerns.ts";
import { toAppAccount } from "../rows.ts";
import type { Sql } from "./sql.ts";

export function appAccountOps(q: Sql): AppAccountOps {
  return {
    insertAppAccount: async (a) => {
      await q.run(
        `INSERT INTO app_accounts (id, owner_id, app, name, credentials_sealed, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)`,
        [a.id, a.ownerId, a.app, a.name, a.credentialsSealed, a.createdAt, a.updatedAt],
      );
    },

    getAppAccount: (id) => q.get("SELECT * FROM app_accounts WHERE id = $1", [id], toAppAccount),

    listAppAccounts: (ownerIds, page) =>
      q.page("app_accounts", "owner_id = ANY($1::text[])", [ownerIds], page, toAppAccount),

    deleteAppAccount: async (id) => (await q.run("DELETE FROM app_accounts WHERE id = $1", [id])) > 0,
  };
}
