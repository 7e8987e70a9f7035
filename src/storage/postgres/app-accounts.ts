/** Connected app accounts (`apn_…`), their credentials sealed. */
import type { AppAccount, WithSeq } from "../../domain/types.ts";
import type { StorageOps } from "../port.ts";
import type { Row, Sql } from "./sql.ts";

export type AppAccountOps = Pick<
  StorageOps,
  "insertAppAccount" | "getAppAccount" | "listAppAccounts" | "deleteAppAccount"
>;

const toAppAccount = (r: Row): WithSeq<AppAccount> => ({
  seq: r.seq as number,
  id: r.id as string,
  ownerId: r.owner_id as string,
  app: r.app as string,
  name: r.name as string,
  credentialsSealed: r.credentials_sealed as string,
  createdAt: r.created_at as number,
  updatedAt: r.updated_at as number,
});

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
