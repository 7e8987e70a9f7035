/** Webhooks, the account-level HTTP destinations. */
import type { Webhook, WithSeq } from "../../domain/types.ts";
import type { StorageOps } from "../port.ts";
import { parkDeliveries } from "./deliveries.ts";
import type { Row, Sql } from "./sql.ts";

export type WebhookOps = Pick<
  StorageOps,
  "insertWebhook" | "getWebhook" | "listWebhooks" | "updateWebhook" | "deleteWebhook"
>;

const toWebhook = (r: Row): WithSeq<Webhook> => ({
  seq: r.seq as number,
  id: r.id as string,
  ownerId: r.owner_id as string,
  createdBy: r.created_by as string,
  name: (r.name as string | null) ?? null,
  description: (r.description as string | null) ?? null,
  url: r.url as string,
  active: r.active as boolean,
  signingSecretSealed: r.signing_secret_sealed as string,
  createdAt: r.created_at as number,
  updatedAt: r.updated_at as number,
});

export function webhookOps(q: Sql): WebhookOps {
  return {
    insertWebhook: async (w) => {
      await q.run(
        `INSERT INTO webhooks (id, owner_id, created_by, name, description, url, active, signing_secret_sealed, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
        [
          w.id,
          w.ownerId,
          w.createdBy,
          w.name,
          w.description,
          w.url,
          w.active,
          w.signingSecretSealed,
          w.createdAt,
          w.updatedAt,
        ],
      );
    },

    getWebhook: (id) => q.get("SELECT * FROM webhooks WHERE id = $1", [id], toWebhook),

    listWebhooks: (ownerIds, page) =>
      q.page("webhooks", "owner_id = ANY($1::text[])", [ownerIds], page, toWebhook),

    updateWebhook: async (id, patch) => {
      const updated = await q.updateColumns(
        "webhooks",
        id,
        patch.updatedAt,
        { name: patch.name, description: patch.description, url: patch.url, active: patch.active },
        toWebhook,
      );
      if (updated && patch.active !== undefined)
        await parkDeliveries(q, id, patch.active, patch.updatedAt * 1000);
      return updated;
    },

    deleteWebhook: async (id) => (await q.run("DELETE FROM webhooks WHERE id = $1", [id])) > 0,
  };
}
