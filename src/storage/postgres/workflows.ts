/** External workflows (`p_…`): emitters and listeners that live outside Fount. */
import type { WithSeq, Workflow } from "../../domain/types.ts";
import type { StorageOps } from "../port.ts";
import type { Row, Sql } from "./sql.ts";

export type WorkflowOps = Pick<
  StorageOps,
  "insertWorkflow" | "getWorkflow" | "listWorkflows" | "deleteWorkflow"
>;

const toWorkflow = (r: Row): WithSeq<Workflow> => ({
  seq: r.seq as number,
  id: r.id as string,
  ownerId: r.owner_id as string,
  createdBy: r.created_by as string,
  name: r.name as string,
  url: (r.url as string | null) ?? null,
  signingSecretSealed: r.signing_secret_sealed as string,
  createdAt: r.created_at as number,
  updatedAt: r.updated_at as number,
});

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
