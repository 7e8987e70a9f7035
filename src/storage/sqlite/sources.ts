/**
 * Components, sources, each source's db and dedupe state. Sources are cached by endpoint and by ID
 * (row-cache.ts): an endpoint hit, a timer tick and a source-to-source delivery read one; every write
 * to `sources` forgets them.
 */
import type { SQLInputValue } from "node:sqlite";
import type { SourceRecord } from "../../domain/types.ts";
import type { SourceOps } from "../concerns.ts";
import { deepFreeze, retentionColumn, toComponent, toSource } from "../rows.ts";
import type { DeferredWrites } from "./deferred.ts";
import type { RowCache } from "./row-cache.ts";
import { placeholders, type Sql } from "./sql.ts";

export function sourceOps(q: Sql, rows: RowCache, held: DeferredWrites): SourceOps {
  const getSource = async (id: string): Promise<SourceRecord | undefined> => {
    const cached = rows.sourcesById.get(id);
    if (cached) return cached;
    const source = q.get("SELECT * FROM sources WHERE id = ?", [id], toSource);
    if (source) rows.sourcesById.set(id, deepFreeze(source));
    return source;
  };
  return {
    insertComponent: async (c) => {
      const meta = JSON.stringify(c.meta);
      const dependencies = JSON.stringify(c.dependencies);
      q.run(
        `INSERT INTO components (id, owner_id, key, name, version, code, code_hash, component_url, meta_json, dependencies_json, created_at, updated_at, stored_bytes)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
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
      q.get(
        "SELECT coalesce(sum(stored_bytes), 0) AS bytes FROM components WHERE owner_id = ?",
        [ownerId],
        (r) => Number(r.bytes),
      ) ?? 0,

    findSameComponent: async (ownerId, codeHash, url) =>
      q.get(
        `SELECT * FROM components c WHERE owner_id = ? AND code_hash = ? AND component_url IS ?
           AND (key IS NULL OR NOT EXISTS (SELECT 1 FROM components n WHERE n.owner_id = c.owner_id AND n.key = c.key AND n.seq > c.seq))
         ORDER BY seq DESC LIMIT 1`,
        [ownerId, codeHash, url],
        toComponent,
      ),

    listDeployedDependencies: async () =>
      q.all(
        "SELECT DISTINCT dependencies_json FROM components WHERE id IN (SELECT component_id FROM sources)",
        [],
        (r) => JSON.parse(r.dependencies_json as string) as Record<string, string>,
      ),

    getComponent: async (id) => q.get("SELECT * FROM components WHERE id = ?", [id], toComponent),

    listLatestComponents: async (ownerIds, page) => {
      const owners = placeholders(ownerIds);
      return q.page(
        "components",
        `owner_id IN (${owners}) AND seq IN (SELECT max(seq) FROM components WHERE owner_id IN (${owners}) GROUP BY owner_id, coalesce(key, id))`,
        [...ownerIds, ...ownerIds],
        page,
        (r) => ({ ...toComponent(r), seq: r.seq as number }),
      );
    },

    findComponentByKey: async (ownerIds, key) =>
      q.get(
        `SELECT * FROM components WHERE owner_id IN (${placeholders(ownerIds)}) AND key = ? ORDER BY seq DESC LIMIT 1`,
        [...ownerIds, key],
        toComponent,
      ),

    insertSource: async (s) => {
      rows.forgetSources();
      q.run(
        `INSERT INTO sources (id, owner_id, created_by, component_id, name, name_slug, active, props_json, endpoint_id, retention_json, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
        [
          s.id,
          s.ownerId,
          s.createdBy,
          s.componentId,
          s.name,
          s.nameSlug,
          s.active ? 1 : 0,
          JSON.stringify(s.props),
          s.endpointId,
          s.retention ? JSON.stringify(s.retention) : null,
          s.createdAt,
          s.updatedAt,
        ],
      );
    },

    getSource,

    getSourceByEndpoint: async (endpointId) => {
      const cached = rows.sourcesByEndpoint.get(endpointId);
      if (cached) return cached;
      const source = q.get("SELECT * FROM sources WHERE endpoint_id = ?", [endpointId], toSource);
      if (source) rows.sourcesByEndpoint.set(endpointId, deepFreeze(source));
      return source;
    },

    getSourceBySlug: async (ownerIds, slug) =>
      q.get(
        `SELECT * FROM sources WHERE owner_id IN (${placeholders(ownerIds)}) AND name_slug = ? ORDER BY seq DESC LIMIT 1`,
        [...ownerIds, slug],
        toSource,
      ),

    // No lock needed, unlike PostgreSQL: SQLite transactions never overlap.
    listSlugs: async (ownerId, base) =>
      q.all(
        "SELECT name_slug FROM sources WHERE owner_id = ? AND (name_slug = ? OR substr(name_slug, 1, ?) = ?)",
        [ownerId, base, base.length + 1, `${base}-`],
        (r) => r.name_slug as string,
      ),

    listSources: async (ownerIds, page) =>
      q.page("sources", `owner_id IN (${placeholders(ownerIds)})`, ownerIds, page, toSource),

    listActiveSourceIds: async () =>
      q.all("SELECT id FROM sources WHERE active = 1 ORDER BY seq", [], (r) => r.id as string),

    updateSource: async (id, patch) => {
      const columns: Record<string, SQLInputValue | undefined> = {
        component_id: patch.componentId,
        name: patch.name,
        name_slug: patch.nameSlug,
        active: patch.active === undefined ? undefined : patch.active ? 1 : 0,
        props_json: patch.props === undefined ? undefined : JSON.stringify(patch.props),
        endpoint_id: patch.endpointId,
        retention_json: retentionColumn(patch.retention),
      };
      rows.forgetSources();
      if (q.updateColumns("sources", id, patch.updatedAt, columns) === 0) return undefined;
      return getSource(id);
    },

    deleteSource: async (id) => {
      held.settle();
      rows.forgetSources();
      rows.emitterOwners.delete(id);
      const removed = q.run("DELETE FROM sources WHERE id = ?", [id]) > 0;
      for (const table of ["source_db", "dedupe_state", "timers"])
        q.run(`DELETE FROM ${table} WHERE source_id = ?`, [id]);
      // Its events are the pruner's (port.ts).
      q.run("DELETE FROM emitter_clock WHERE emitter_id = ?", [id]);
      return removed;
    },

    getSourceDb: async (sourceId) =>
      q.get("SELECT data_json, version FROM source_db WHERE source_id = ?", [sourceId], (r) => ({
        data: JSON.parse(r.data_json as string) as Record<string, unknown>,
        version: r.version as number,
      })) ?? { data: {}, version: 0 },

    putSourceDb: async (sourceId, data, version) => {
      q.run(
        `INSERT INTO source_db (source_id, data_json, version) VALUES (?, ?, ?)
       ON CONFLICT (source_id) DO UPDATE SET data_json = excluded.data_json, version = excluded.version`,
        [sourceId, JSON.stringify(data), version],
      );
    },

    getDedupeState: async (sourceId) =>
      q.get("SELECT state_json FROM dedupe_state WHERE source_id = ?", [sourceId], (r) =>
        JSON.parse(r.state_json as string),
      ),

    putDedupeState: async (sourceId, state) => {
      q.run(
        `INSERT INTO dedupe_state (source_id, state_json) VALUES (?, ?)
       ON CONFLICT (source_id) DO UPDATE SET state_json = excluded.state_json`,
        [sourceId, JSON.stringify(state)],
      );
    },

    // One node owns a SQLite file (the data dir lock), so no other node can hold a source's lease.
    assertSourceLease: async () => {},
  };
}
