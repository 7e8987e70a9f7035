/** Webhooks. Cached (row-cache.ts): the dispatcher reads one for every delivery attempt. */
import type { SQLInputValue } from "node:sqlite";
import type { Webhook } from "../../domain/types.ts";
import type { WebhookOps } from "../concerns.ts";
import { deepFreeze, toWebhook } from "../rows.ts";
import type { RowCache } from "./row-cache.ts";
import { placeholders, type Sql } from "./sql.ts";

export function webhookOps(q: Sql, rows: RowCache): WebhookOps {
  const getWebhook = async (id: string): Promise<Webhook | undefined> => {
    const cached = rows.webhooks.get(id);
    if (cached) return cached;
    const webhook = q.get("SELECT * FROM webhooks WHERE id = ?", [id], toWebhook);
    if (webhook) rows.webhooks.set(id, deepFreeze(webhook));
    return webhook;
  };
  return {
    insertWebhook: async (w) => {
      q.run(
        `INSERT INTO webhooks (id, owner_id, created_by, name, description, url, active, signing_secret_sealed, allow_private, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
        [
          w.id,
          w.ownerId,
          w.createdBy,
          w.name,
          w.description,
          w.url,
          w.active ? 1 : 0,
          w.signingSecretSealed,
          w.allowPrivate ? 1 : 0,
          w.createdAt,
          w.updatedAt,
        ],
      );
    },

    getWebhook,

    listWebhooks: async (ownerIds, page) =>
      q.page("webhooks", `owner_id IN (${placeholders(ownerIds)})`, ownerIds, page, toWebhook),

    updateWebhook: async (id, patch) => {
      const columns: Record<string, SQLInputValue | undefined> = {
        name: patch.name,
        description: patch.description,
        url: patch.url,
        active: patch.active === undefined ? undefined : patch.active ? 1 : 0,
        allow_private: patch.allowPrivate === undefined ? undefined : patch.allowPrivate ? 1 : 0,
      };
      rows.webhooks.delete(id);
      if (q.updateColumns("webhooks", id, patch.updatedAt, columns) === 0) return undefined;
      return getWebhook(id);
    },

    deleteWebhook: async (id) => {
      rows.webhooks.delete(id);
      return q.run("DELETE FROM webhooks WHERE id = ?", [id]) > 0;
    },
  };
}
