import type { SourceOps } from "../concerns.ts";
import { retentionColumn, toComponent, toSource } from "../rows.ts";
import type { Sql } from "./sql.ts";

export function sourceOps(q: Sql): SourceOps {
  return {
    insertComponent: async (c) => {
      const meta = JSON.stringify(c.meta);
      const dependencies = JSON.stringify(c.dependencies);
      await q.run(
        `INSERT INTO components (id, owner_id, key, name, version, code, code_hash, component_url, meta_json,
           dependencies_json, created_at, updated_at, stored_bytes)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
        [
          c.id,
          c.ownerId,
          c.key,
          c.name,
          c.version,
          c.code,
          c.codeHash,
          c.componentUrl,
          meta,
          dependencies,
          c.createdAt,
          c.updatedAt,
          Buffer.byteLength(c.code) + Buffer.byteLength(meta) + Buffer.byteLength(dependencies),
        ],
      );
    },

    componentBytes: async (ownerId) =>
      (await q.get(
        "SELECT coalesce(sum(stored_bytes), 0) AS bytes FROM components WHERE owner_id = $1",
        [ownerId],
        (r) => Number(r.bytes),
      )) ?? 0,

    findSameComponent: (ownerId, codeHash, url) =>
      q.get(
        `SELECT * FROM components c WHERE owner_id = $1 AND code_hash = $2 AND component_url IS NOT DISTINCT FROM $3
           AND (key IS NULL OR NOT EXISTS (SELECT 1 FROM components n WHERE n.owner_id = c.owner_id AND n.key = c.key AND n.seq > c.seq))
         ORDER BY seq DESC LIMIT 1`,
        [ownerId, codeHash, url],
        toComponent,
      ),

    listDeployedDependencies: () =>
      q.all(
        "SELECT DISTINCT dependencies_json FROM components WHERE id IN (SELECT component_id FROM sources)",
        [],
        (r) => JSON.parse(r.dependencies_json as string) as Record<string, string>,
      ),

    getComponent: (id) => q.get("SELECT * FROM components WHERE id = $1", [id], toComponent),

    listLatestComponents: (ownerIds, page) =>
      q.page(
        "components",
        `owner_id = ANY($1::text[]) AND seq IN (SELECT max(seq) FROM components WHERE owner_id = ANY($1::text[])
           GROUP BY owner_id, coalesce(key, id))`,
        [ownerIds],
        page,
        (r) => ({ ...toComponent(r), seq: Number(r.seq) }),
      ),

    findComponentByKey: (ownerIds, key) =>
      q.get(
        "SELECT * FROM components WHERE owner_id = ANY($1::text[]) AND key = $2 ORDER BY seq DESC LIMIT 1",
        [ownerIds, key],
        toComponent,
      ),

    insertSource: async (s) => {
      await q.run(
        `INSERT INTO sources (id, owner_id, created_by, component_id, name, name_slug, active, props_json,
           endpoint_id, retention_json, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
        [
          s.id,
          s.ownerId,
          s.createdBy,
          s.componentId,
          s.name,
          s.nameSlug,
          s.active,
          JSON.stringify(s.props),
          s.endpointId,
          s.retention ? JSON.stringify(s.retention) : null,
          s.createdAt,
          s.updatedAt,
        ],
      );
    },

    getSource: (id) => q.get("SELECT * FROM sources WHERE id = $1", [id], toSource),

    // No row cache here (the SQLite driver keeps one): another node may change the row at any time.
    getSourceByEndpoint: (endpointId) =>
      q.get("SELECT * FROM sources WHERE endpoint_id = $1", [endpointId], toSource),

    getSourceBySlug: (ownerIds, slug) =>
      q.get(
        "SELECT * FROM sources WHERE owner_id = ANY($1::text[]) AND name_slug = $2 ORDER BY seq DESC LIMIT 1",
        [ownerIds, slug],
        toSource,
      ),

    // The slugs are read to pick a free one, which the caller stores in the same transaction. On SQLite
    // transactions never overlap; here two deploys of one name could both pick `name-1`, so the owner's
    // slugs are locked until the transaction ends. The lock is its own statement: a statement's snapshot
    // is taken when it starts, so a SELECT that waited for the lock would not see the winner's row.
    listSlugs: async (ownerId, base) => {
      await q.run("SELECT pg_advisory_xact_lock(hashtextextended('fount.slugs.' || $1, 0))", [ownerId]);
      return q.all(
        "SELECT name_slug FROM sources WHERE owner_id = $1 AND (name_slug = $2 OR left(name_slug, $3) = $4)",
        [ownerId, base, base.length + 1, `${base}-`],
        (r) => r.name_slug as string,
      );
    },

    listSources: (ownerIds, page) =>
      q.page("sources", "owner_id = ANY($1::text[])", [ownerIds], page, toSource),

    listActiveSourceIds: () =>
      q.all("SELECT id FROM sources WHERE active ORDER BY seq", [], (r) => r.id as string),

    updateSource: async (id, patch) => {
      const updated = await q.updateColumns(
        "sources",
        id,
        patch.updatedAt,
        {
          component_id: patch.componentId,
          name: patch.name,
          name_slug: patch.nameSlug,
          active: patch.active,
          props_json: patch.props === undefined ? undefined : JSON.stringify(patch.props),
          endpoint_id: patch.endpointId,
          retention_json: retentionColumn(patch.retention),
        },
        toSource,
      );
      return updated;
    },

    deleteSource: async (id) => {
      const removed = (await q.run("DELETE FROM sources WHERE id = $1", [id])) > 0;
      for (const table of ["source_db", "dedupe_state", "timers"])
        await q.run(`DELETE FROM ${table} WHERE source_id = $1`, [id]);
      // Its events are the pruner's (port.ts).
      await q.run("DELETE FROM emitter_clock WHERE emitter_id = $1", [id]);
      return removed;
    },

    getSourceDb: async (sourceId) =>
      (await q.get("SELECT data_json, version FROM source_db WHERE source_id = $1", [sourceId], (r) => ({
        data: JSON.parse(r.data_json as string) as Record<string, unknown>,
        version: r.version as number,
      }))) ?? { data: {}, version: 0 },

    putSourceDb: async (sourceId, data, version) => {
      await q.defer(
        `INSERT INTO source_db (source_id, data_json, version) VALUES ($1, $2, $3)
         ON CONFLICT (source_id) DO UPDATE SET data_json = excluded.data_json, version = excluded.version`,
        [sourceId, JSON.stringify(data), version],
      );
    },

    getDedupeState: (sourceId) =>
      q.get("SELECT state_json FROM dedupe_state WHERE source_id = $1", [sourceId], (r) =>
        JSON.parse(r.state_json as string),
      ),

    putDedupeState: async (sourceId, state) => {
      await q.defer(
        `INSERT INTO dedupe_state (source_id, state_json) VALUES ($1, $2)
         ON CONFLICT (source_id) DO UPDATE SET state_json = excluded.state_json`,
        [sourceId, JSON.stringify(state)],
      );
    },

    // Held back with the commit's other writes; it raises FL001 (lease_lost) if the lease moved on. The
    // runs of one source in a group commit hold one lease: it is checked once for all of them.
    assertSourceLease: (sourceId, nodeId, gen) =>
      q.deferMerged(`lease\0${sourceId}\0${nodeId}\0${gen}`, null, () => ({
        text: "SELECT fount_assert_lease($1, $2, $3)",
        params: [sourceId, nodeId, gen],
      })),
  };
}
