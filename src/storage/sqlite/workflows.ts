/** External workflows (`p_…`): listeners that receive deliveries at a URL, and emitters of events. */
import type { WorkflowOps } from "../concerns.ts";
import { toWorkflow } from "../rows.ts";
import type { RowCache } from "./row-cache.ts";
import { placeholders, type Sql } from "./sql.ts";

export function workflowOps(q: Sql, rows: RowCache): WorkflowOps {
  return {
    insertWorkflow: async (w) => {
      q.run(
        `INSERT INTO workflows (id, owner_id, created_by, name, url, signing_secret_sealed, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
        [w.id, w.ownerId, w.createdBy, w.name, w.url, w.signingSecretSealed, w.createdAt, w.updatedAt],
      );
    },

    getWorkflow: async (id) =>
      q.get("SELECT * FROM workflows WHERE id = ?", [id], (r) => {
        const { seq: _seq, ...rest } = toWorkflow(r);
        return rest;
      }),

    listWorkflows: async (ownerIds, page) => {
      if (ownerIds.length === 0) return { items: [], totalCount: 0 };
      return q.page("workflows", `owner_id IN (${placeholders(ownerIds)})`, ownerIds, page, toWorkflow);
    },

    deleteWorkflow: async (id) => {
      // A workflow is an emitter: routing remembers its owner (row-cache.ts).
      rows.emitterOwners.delete(id);
      return q.run("DELETE FROM workflows WHERE id = ?", [id]) > 0;
    },
  };
}
