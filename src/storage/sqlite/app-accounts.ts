/** Connected app accounts: credentials sealed, listed by owner. */
import type { AppAccountOps } from "../concerns.ts";
import { toAppAccount } from "../rows.ts";
import { placeholders, type Sql } from "./sql.ts";

export function appAccountOps(q: Sql): AppAccountOps {
  return {
    insertAppAccount: async (a) => {
      q.run(
        `INSERT INTO app_accounts (id, owner_id, app, name, credentials_sealed, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
        [a.id, a.ownerId, a.app, a.name, a.credentialsSealed, a.createdAt, a.updatedAt],
      );
    },

    getAppAccount: async (id) => q.get("SELECT * FROM app_accounts WHERE id = ?", [id], toAppAccount),

    listAppAccounts: async (ownerIds, page) =>
      q.page("app_accounts", `owner_id IN (${placeholders(ownerIds)})`, ownerIds, page, toAppAccount),

    deleteAppAccount: async (id) => q.run("DELETE FROM app_accounts WHERE id = ?", [id]) > 0,
  };
}
