/** Subscriptions (emitter → listener routes), auto-subscriptions, and owners of resources by ID. */
import type { Subscription } from "../../domain/types.ts";
import type { SubscriptionOps } from "../concerns.ts";
import { ownedTables, routesBetween, toAutoSubscription, toSubscription } from "../rows.ts";
import { deliveryDeleteBatch, unclaimedBatchSql } from "../subscription-deletes.ts";
import type { Sql } from "./sql.ts";

/**
 * `remember`: inside one transaction (a group commit of many events of one emitter), the owner of an
 * emitter and the subscriptions matching it are read once and remembered until the transaction ends;
 * a write to subscriptions in the transaction forgets them. Nothing is kept beyond the transaction, so
 * another process's changes are seen by the next one.
 */
export function subscriptionOps(q: Sql, remember = false): SubscriptionOps {
  const owners = new Map<string, Promise<string | undefined>>();
  const matches = new Map<string, Promise<Subscription[]>>();
  const memo = <T>(cache: Map<string, Promise<T>>, key: string, read: () => Promise<T>): Promise<T> => {
    if (!remember) return read();
    let found = cache.get(key);
    if (!found) {
      found = read();
      cache.set(key, found);
      // A failed read is not remembered.
      found.catch(() => cache.delete(key));
    }
    return found;
  };
  const changed = () => matches.clear();
  /** Deletes subscription `id`'s claimed deliveries and a batch of the others, as SQLite's `sweep`. */
  const sweep = async (id: string, listenerId: string) => {
    await q.run(
      "DELETE FROM deliveries WHERE claimed_by IS NOT NULL AND listener_id = $1 AND subscription_id = $2",
      [listenerId, id],
    );
    if (
      (await q.run(unclaimedBatchSql(["$1", "$2", "$3"], ""), [listenerId, id, deliveryDeleteBatch])) <
      deliveryDeleteBatch
    )
      await q.run("DELETE FROM subscription_deletes WHERE id = $1", [id]);
  };
  return {
    // One statement: the insert, or the row that was there (a concurrent twin's included once committed).
    upsertSubscription: async (s) => {
      changed();
      await q.run(
        `INSERT INTO subscriptions (id, owner_id, emitter_id, listener_id, event_name, created_at)
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (owner_id, emitter_id, listener_id, event_name) DO NOTHING`,
        [s.id, s.ownerId, s.emitterId, s.listenerId, s.eventName, s.createdAt],
      );
      return (await q.get(
        "SELECT * FROM subscriptions WHERE owner_id = $1 AND emitter_id = $2 AND listener_id = $3 AND event_name = $4",
        [s.ownerId, s.emitterId, s.listenerId, s.eventName],
        toSubscription,
      ))!;
    },

    listSubscriptions: (ownerIds, page) =>
      q.page("subscriptions", "owner_id = ANY($1::text[])", [ownerIds], page, (r) => ({
        ...toSubscription(r),
        seq: Number(r.seq),
      })),

    deleteSubscriptions: async (ownerIds, m) => {
      changed();
      const found = await q.all(
        `DELETE FROM subscriptions
         WHERE owner_id = ANY($1::text[]) AND emitter_id = $2 AND listener_id = $3 AND event_name = $4
         RETURNING *`,
        [ownerIds, m.emitterId, m.listenerId, m.eventName],
        toSubscription,
      );
      // What the subscriptions had not delivered goes with them, as in SQLite's (the same file there): a
      // batch now, and the rest marked for `sweepDeletedSubscriptions`.
      for (const sub of found) {
        await q.run("INSERT INTO subscription_deletes (id, listener_id) VALUES ($1, $2)", [
          sub.id,
          sub.listenerId,
        ]);
        await sweep(sub.id, sub.listenerId);
      }
      return found;
    },

    sweepDeletedSubscriptions: async () => {
      const next = await q.get("SELECT id, listener_id FROM subscription_deletes LIMIT 1", [], (r) => r);
      if (next === undefined) return false;
      await sweep(next.id as string, next.listener_id as string);
      return true;
    },

    deleteSubscriptionsOf: async (resourceId) => {
      changed();
      return (
        (await q.run("DELETE FROM subscriptions WHERE emitter_id = $1 OR listener_id = $1", [resourceId])) +
        (await q.run("DELETE FROM auto_subscriptions WHERE listener_id = $1", [resourceId]))
      );
    },

    deleteRoutesBetween: async (a, b) => {
      changed();
      let n = 0;
      for (const sql of routesBetween("$1", "$2", () => "")) n += await q.run(sql, [a, b]);
      return n;
    },

    upsertAutoSubscription: async (a) => {
      await q.run(
        `INSERT INTO auto_subscriptions (id, owner_id, listener_id, event_name, created_at) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (owner_id, listener_id, event_name) DO NOTHING`,
        [a.id, a.ownerId, a.listenerId, a.eventName, a.createdAt],
      );
      return (await q.get(
        "SELECT * FROM auto_subscriptions WHERE owner_id = $1 AND listener_id = $2 AND event_name = $3",
        [a.ownerId, a.listenerId, a.eventName],
        toAutoSubscription,
      ))!;
    },

    listAutoSubscriptions: (ownerIds) =>
      q.all(
        "SELECT * FROM auto_subscriptions WHERE owner_id = ANY($1::text[]) ORDER BY seq DESC",
        [ownerIds],
        toAutoSubscription,
      ),

    resourceOwner: (id) => {
      const table = ownedTables[id.slice(0, id.indexOf("_"))];
      if (!table) return Promise.resolve(undefined);
      // Only emitters' owners are remembered: they never change, and deleting one is not done in a
      // transaction that routes its events.
      const read = () =>
        q.get(`SELECT owner_id FROM ${table} WHERE id = $1`, [id], (r) => r.owner_id as string);
      return table === "sources" || table === "workflows" ? memo(owners, id, read) : read();
    },

    matchSubscriptions: (emitterId, emitterOwnerId, channel) =>
      memo(matches, `${emitterId}\0${emitterOwnerId ?? ""}\0${channel}`, () =>
        matching(q, emitterId, emitterOwnerId, channel),
      ),

    // Never remembered: it guards a write (the cap on listeners per emitter).
    countListeners: (emitter, ownerId) => countListeners(q, emitter, ownerId),
  };
}

/** As SQLite's `countListeners` (storage/sqlite/subscriptions.ts), in one statement. */
async function countListeners(q: Sql, emitter: string, ownerId: string): Promise<number> {
  const glob = `${emitter.slice(0, emitter.indexOf("_") + 1)}*`;
  const globs = "(SELECT count(*) FROM subscriptions WHERE emitter_id = $1 AND owner_id = $2)";
  if (emitter !== glob) {
    const sql = `SELECT ${globs} + (SELECT count(*) FROM subscriptions WHERE emitter_id = $3) AS n`;
    return (await q.get(sql, [glob, ownerId, emitter], (r) => Number(r.n))) ?? 0;
  }
  const table = glob === "dc_*" ? "sources" : "workflows";
  const busiest = `(SELECT coalesce(max(c), 0) FROM (SELECT count(*) AS c FROM subscriptions s
    JOIN ${table} e ON e.id = s.emitter_id WHERE e.owner_id = $2 GROUP BY s.emitter_id) AS each_emitter)`;
  const rules = "(SELECT count(*) FROM auto_subscriptions WHERE owner_id = $2)";
  const sql = `SELECT ${globs} + greatest(${busiest}, ${rules}) AS n`;
  return (await q.get(sql, [glob, ownerId], (r) => Number(r.n))) ?? 0;
}

function matching(
  q: Sql,
  emitterId: string,
  emitterOwnerId: string | undefined,
  channel: string,
): Promise<Subscription[]> {
  const prefix = emitterId.slice(0, emitterId.indexOf("_") + 1);
  if (emitterOwnerId === undefined || (prefix !== "dc_" && prefix !== "p_")) {
    return q.all(
      "SELECT * FROM subscriptions WHERE emitter_id = $1 AND event_name = $2 ORDER BY seq",
      [emitterId, channel],
      toSubscription,
    );
  }
  return q.all(
    `SELECT * FROM subscriptions
     WHERE event_name = $1 AND (emitter_id = $2 OR (emitter_id = $3 AND owner_id = $4)) ORDER BY seq`,
    [channel, emitterId, `${prefix}*`, emitterOwnerId],
    toSubscription,
  );
}
