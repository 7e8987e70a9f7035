import type { WorkflowOps } from "../concerns.ts";
import { toWorkflow } from "../rows.ts";
import type { Sql } from "./sql.ts";

export function workflowOps(q: Sql): WorkflowOps {
  return {
    insertWorkflow: async (w) => {
      await q.run(
        `INSERT INTO workflows (id, owner_id, created_by, name, url, signing_secret_sealed, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
        [w.id, w.ownerId, w.createdBy, w.name, w.url, w.signingSecretSealed, w.createdAt, w.updatedAt],
      );
    },

    getWorkflow: (id) =>
      q.get("SELECT * FROM workflows WHERE id = $1", [id], (r) => {
        const { seq: _seq, ...rest } = toWorkflow(r);
        return rest;
      }),

    listWorkflows: (ownerIds, page) =>
      q.page("workflows", "owner_id = ANY($1::text[])", [ownerIds], page, toWorkflow),

    deleteWorkflow: async (id) => (await q.run("DELETE FROM workflows WHERE id = $1", [id])) > 0,
  };
}
