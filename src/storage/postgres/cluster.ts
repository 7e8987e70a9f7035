/**
 * What several nodes on one database share: heartbeats, source run leases, and LISTEN/NOTIFY messages.
 * A listener holds a connection of its own (a pooled one would be handed to other work between
 * messages), opened again with a growing delay when it breaks.
 *
 * NOTIFY channels belong to the database, not to a schema: a channel's name is suffixed with the
 * store's schema, so that Fount clusters on different schemas of one database never hear each other.
 */
import { createHash } from "node:crypto";
import pg from "pg";
import type { ClusterStore } from "../port.ts";
import type { Sql } from "./sql.ts";

/** How to open a listening connection: the pool's own settings. */
export interface ListenConfig {
  connectionString: string;
  options: string;
  connectionTimeoutMillis: number;
}

/** The database's clock in epoch milliseconds: the one clock all nodes read for liveness. */
const dbNowMs = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/** Whether the node whose heartbeat is `column` is alive: it beat at most `deadAfterMs` (a parameter) ago. */
export const alive = (column: string, deadAfterMs: string) => `${column} >= ${dbNowMs} - ${deadAfterMs}`;

/** Waits before a broken listening connection is opened again: 0.1 s, doubling up to 5 s. */
const reconnectDelaysMs = { first: 100, max: 5_000 };

/** PostgreSQL truncates identifiers, channel names included, to 63 bytes. */
const maxChannelBytes = 63;

/** `channel` of the store in `schema`: the schema's name, or its hash when that would not fit. */
export function schemaChannel(channel: string, schema: string): string {
  const named = `${channel}:${schema}`;
  if (Buffer.byteLength(named) <= maxChannelBytes) return named;
  const room = maxChannelBytes - Buffer.byteLength(channel) - 1;
  return `${channel}:${createHash("sha256").update(schema).digest("hex").slice(0, room)}`;
}

/** The cluster operations on the database; the row caches' part (`onStale`, `forgetCached`) is the driver's. */
export function clusterStore(
  q: Sql,
  listenConfig: ListenConfig,
): Omit<ClusterStore, "onStale" | "forgetCached"> {
  let schema: Promise<string> | undefined;
  /** The store's name for `channel` (the schema is read once; a failed read is tried again). */
  const scoped = async (channel: string): Promise<string> => {
    schema ??= q.get("SELECT current_schema() AS s", [], (r) => r.s as string).then((s) => s ?? "public");
    try {
      return schemaChannel(channel, await schema);
    } catch (err) {
      schema = undefined;
      throw err;
    }
  };
  return {
    heartbeat: async (nodeId, url, held) => {
      await q.run(
        `INSERT INTO nodes (id, started_ms, heartbeat_ms, url, held) VALUES ($1, ${dbNowMs}, ${dbNowMs}, $2, $3)
         ON CONFLICT (id) DO UPDATE SET heartbeat_ms = excluded.heartbeat_ms, url = excluded.url, held = excluded.held`,
        [nodeId, url ?? null, held],
      );
      // Every process is a member of its own name, so killed ones leave rows behind: gone after a day.
      await q.run(`DELETE FROM nodes WHERE heartbeat_ms < ${dbNowMs} - 86400000`, []);
    },

    liveNodes: (deadAfterMs) =>
      q.all(
        `SELECT id, url, held FROM nodes WHERE ${alive("heartbeat_ms", "$1")} ORDER BY id`,
        [deadAfterMs],
        (r) => ({ id: r.id as string, url: (r.url as string | null) ?? undefined, held: Number(r.held) }),
      ),

    nodes: (deadAfterMs) =>
      q.all(
        `SELECT n.id, n.url, n.started_ms, n.heartbeat_ms, ${dbNowMs} - n.heartbeat_ms AS age_ms,
           ${alive("n.heartbeat_ms", "$1")} AS live,
           (SELECT count(*)::int FROM source_leases l WHERE l.node_id = n.id) AS leases
         FROM nodes n ORDER BY n.started_ms, n.id`,
        [deadAfterMs],
        (r) => ({
          id: r.id as string,
          url: (r.url as string | null) ?? undefined,
          startedMs: Number(r.started_ms),
          heartbeatMs: Number(r.heartbeat_ms),
          heartbeatAgeMs: Math.max(0, Number(r.age_ms)),
          live: r.live as boolean,
          leases: r.leases as number,
        }),
      ),

    leave: async (nodeId) => {
      await q.run("DELETE FROM nodes WHERE id = $1", [nodeId]);
    },

    // One statement: taken when free, held by this node already, or held by a node whose heartbeat
    // stopped (or that left); the row lock of ON CONFLICT makes concurrent takings queue.
    acquireSourceLease: (sourceId, nodeId, deadAfterMs) =>
      q.get(
        `INSERT INTO source_leases AS l (source_id, node_id, gen, acquired_ms) VALUES ($1, $2, 1, ${dbNowMs})
         ON CONFLICT (source_id) DO UPDATE SET node_id = excluded.node_id, gen = l.gen + 1, acquired_ms = excluded.acquired_ms
         WHERE l.node_id IS NULL OR l.node_id = $2
            OR NOT EXISTS (SELECT 1 FROM nodes n WHERE n.id = l.node_id AND ${alive("n.heartbeat_ms", "$3")})
         RETURNING gen`,
        [sourceId, nodeId, deadAfterMs],
        (r) => r.gen as number,
      ),

    sourceLeaseHolder: (sourceId, deadAfterMs) =>
      q.get(
        `SELECT l.node_id FROM source_leases l JOIN nodes n ON n.id = l.node_id
         WHERE l.source_id = $1 AND ${alive("n.heartbeat_ms", "$2")}`,
        [sourceId, deadAfterMs],
        (r) => r.node_id as string,
      ),

    leasedElsewhere: async (sourceIds, nodeId, deadAfterMs) =>
      new Set(
        sourceIds.length === 0
          ? []
          : await q.all(
              `SELECT l.source_id FROM source_leases l JOIN nodes n ON n.id = l.node_id
               WHERE l.source_id = ANY($1::text[]) AND l.node_id <> $2 AND ${alive("n.heartbeat_ms", "$3")}`,
              [sourceIds, nodeId, deadAfterMs],
              (r) => r.source_id as string,
            ),
      ),

    releaseSourceLease: async (sourceId, nodeId, gen) => {
      await q.run(
        "UPDATE source_leases SET node_id = NULL WHERE source_id = $1 AND node_id = $2 AND gen = $3",
        [sourceId, nodeId, gen],
      );
    },

    notify: async (channel, payload) => {
      await q.run("SELECT pg_notify($1, $2)", [await scoped(channel), payload]);
    },

    listen: async (name, onMessage, onGap, onListening) => {
      const channel = await scoped(name);
      let stopped = false;
      let client: pg.Client | undefined;
      let delay = reconnectDelaysMs.first;
      let retry: NodeJS.Timeout | undefined;
      const open = async (): Promise<void> => {
        const c = new pg.Client(listenConfig);
        c.on("notification", (m) => {
          if (m.channel === channel) onMessage(m.payload ?? "");
        });
        c.on("error", (err) => {
          // The connection broke: drop it and open another after a delay.
          if (client !== c) return;
          client = undefined;
          c.end().catch(() => undefined);
          if (!stopped) {
            onGap?.(err);
            schedule();
          }
        });
        await c.connect();
        await c.query(`LISTEN ${c.escapeIdentifier(channel)}`);
        if (stopped) {
          await c.end().catch(() => undefined);
          return;
        }
        client = c;
        delay = reconnectDelaysMs.first;
        onListening?.();
      };
      const schedule = () => {
        retry = setTimeout(() => {
          retry = undefined;
          open().catch((err: Error) => {
            if (stopped) return;
            onGap?.(err);
            delay = Math.min(delay * 2, reconnectDelaysMs.max);
            schedule();
          });
        }, delay);
        retry.unref();
      };
      await open();
      return async () => {
        stopped = true;
        if (retry) clearTimeout(retry);
        const c = client;
        client = undefined;
        await c?.end().catch(() => undefined);
      };
    },
  };
}
