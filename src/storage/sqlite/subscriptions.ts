/**
 * Subscriptions (emitter → listener routes), auto-subscriptions, and owners of resources by ID. What
 * routing reads for every stored event (emitters' owners, the subscriptions matching a channel) is
 * cached (row-cache.ts); any write to `subscriptions` forgets the matches.
 */
import type { Subscription } from "../../domain/types.ts";
import type { SubscriptionOps } from "../concerns.ts";
import { deepFreeze, ownedTables, routesBetween, toAutoSubscription, toSubscription } from "../rows.ts";
import { deliveryDeleteBatch, unclaimedBatchSql } from "../subscription-deletes.ts";
import type { RowCache } from "./row-cache.ts";
import { placeholders, type Sql } from "./sql.ts";

export function subscriptionOps(q: Sql, rows: RowCache): SubscriptionOps {
  /**
   * Deletes subscription `id`'s claimed deliveries (a few in flight, whose settlement then finds no row,
   * through their own index) and a batch of the others, through the claims' index, which holds the
   * listener; a short batch was the last, and takes the mark with it.
   */
  const sweep = (id: string, listenerId: string) => {
    q.run(
      "DELETE FROM deliveries INDEXED BY deliveries_claimed WHERE claimed_by IS NOT NULL AND listener_id = ? AND subscription_id = ?",
      [listenerId, id],
    );
    const batch = unclaimedBatchSql(["?", "?", "?"], "INDEXED BY deliveries_claimable");
    if (q.run(batch, [listenerId, id, deliveryDeleteBatch]) < deliveryDeleteBatch)
      q.run("DELETE FROM subscription_deletes WHERE id = ?", [id]);
  };
  return {
    upsertSubscription: async (s) => {
      rows.matches.clear();
      q.run(
        `INSERT INTO subscriptions (id, owner_id, emitter_id, listener_id, event_name, created_at) VALUES (?, ?, ?, ?, ?, ?)
       ON CONFLICT (owner_id, emitter_id, listener_id, event_name) DO NOTHING`,
        [s.id, s.ownerId, s.emitterId, s.listenerId, s.eventName, s.createdAt],
      );
      return q.get(
        "SELECT * FROM subscriptions WHERE owner_id = ? AND emitter_id = ? AND listener_id = ? AND event_name = ?",
        [s.ownerId, s.emitterId, s.listenerId, s.eventName],
        toSubscription,
      )!;
    },

    listSubscriptions: async (ownerIds, page) =>
      q.page("subscriptions", `owner_id IN (${placeholders(ownerIds)})`, ownerIds, page, (r) => ({
        ...toSubscription(r),
        seq: r.seq as number,
      })),

    deleteSubscriptions: async (ownerIds, m) => {
      const where = `owner_id IN (${placeholders(ownerIds)}) AND emitter_id = ? AND listener_id = ? AND event_name = ?`;
      const params = [...ownerIds, m.emitterId, m.listenerId, m.eventName];
      const found = q.all(`SELECT * FROM subscriptions WHERE ${where}`, params, toSubscription);
      rows.matches.clear();
      q.run(`DELETE FROM subscriptions WHERE ${where}`, params);
      // What the subscription had not delivered goes with it: otherwise each create (with backfill) and
      // delete of one pair left up to 32 MiB queued, a cycle at a time (docs/delivery.md, "Backfill").
      // A batch now, and the rest (a backlog past it) marked for `sweepDeletedSubscriptions`.
      for (const sub of found) {
        q.run("INSERT INTO subscription_deletes (id, listener_id) VALUES (?, ?)", [sub.id, sub.listenerId]);
        sweep(sub.id, sub.listenerId);
      }
      return found;
    },

    sweepDeletedSubscriptions: async () => {
      const next = q.get("SELECT id, listener_id FROM subscription_deletes LIMIT 1", [], (r) => r);
      if (next === undefined) return false;
      sweep(next.id as string, next.listener_id as string);
      return true;
    },

    deleteSubscriptionsOf: async (resourceId) => {
      rows.matches.clear();
      return (
        q.run("DELETE FROM subscriptions WHERE emitter_id = ? OR listener_id = ?", [resourceId, resourceId]) +
        q.run("DELETE FROM auto_subscriptions WHERE listener_id = ?", [resourceId])
      );
    },

    deleteRoutesBetween: async (a, b) => {
      rows.matches.clear();
      return routesBetween("?1", "?2", (index) => `INDEXED BY ${index}`).reduce(
        (n, sql) => n + q.run(sql, [a, b]),
        0,
      );
    },

    upsertAutoSubscription: async (a) => {
      q.run(
        `INSERT INTO auto_subscriptions (id, owner_id, listener_id, event_name, created_at) VALUES (?, ?, ?, ?, ?)
       ON CONFLICT (owner_id, listener_id, event_name) DO NOTHING`,
        [a.id, a.ownerId, a.listenerId, a.eventName, a.createdAt],
      );
      return q.get(
        "SELECT * FROM auto_subscriptions WHERE owner_id = ? AND listener_id = ? AND event_name = ?",
        [a.ownerId, a.listenerId, a.eventName],
        toAutoSubscription,
      )!;
    },

    listAutoSubscriptions: async (ownerIds) =>
      q.all(
        `SELECT * FROM auto_subscriptions WHERE owner_id IN (${placeholders(ownerIds)}) ORDER BY seq DESC`,
        ownerIds,
        toAutoSubscription,
      ),

    resourceOwner: async (id) => {
      const prefix = id.slice(0, id.indexOf("_"));
      const table = ownedTables[prefix];
      if (!table) return undefined;
      // Only emitters' owners are cached: they never change, and deleting one forgets it.
      const emitter = prefix === "dc" || prefix === "p";
      const cached = emitter ? rows.emitterOwners.get(id) : undefined;
      if (cached !== undefined) return cached;
      const owner = q.get(`SELECT owner_id FROM ${table} WHERE id = ?`, [id], (r) => r.owner_id as string);
      if (emitter && owner !== undefined) rows.emitterOwners.set(id, owner);
      return owner;
    },

    matchSubscriptions: async (emitterId, emitterOwnerId, channel) =>
      rows.matches.getOrSet(`${emitterId}\0${emitterOwnerId ?? ""}\0${channel}`, () =>
        deepFreeze(matching(q, emitterId, emitterOwnerId, channel)),
      ),

    // Read fresh, never cached: it guards a write (the cap on listeners per emitter).
    countListeners: async (emitter, ownerId) => countListeners(q, emitter, ownerId),
  };
}

/** The subscriptions of an emitter's channel, and its owner's wildcard ones (`dc_*`, `p_*`) for it. */
function matching(
  q: Sql,
  emitterId: string,
  emitterOwnerId: string | undefined,
  channel: string,
): Subscription[] {
  const prefix = emitterId.slice(0, emitterId.indexOf("_") + 1);
  if (emitterOwnerId === undefined || (prefix !== "dc_" && prefix !== "p_")) {
    return q.all(
      "SELECT * FROM subscriptions WHERE emitter_id = ? AND event_name = ? ORDER BY seq",
      [emitterId, channel],
      toSubscription,
    );
  }
  return q.all(
    `SELECT * FROM subscriptions WHERE event_name = ? AND (emitter_id = ? OR (emitter_id = ? AND owner_id = ?))
       ORDER BY seq`,
    [channel, emitterId, `${prefix}*`, emitterOwnerId],
    toSubscription,
  );
}

/**
 * The subscriptions that route an emitter's events (any channel): those naming it, and its owner's glob of
 * its kind. For a glob: the owner's globs, and the most that name one of the owner's emitters of that kind
 * or the owner's auto-subscriptions (each new source or workflow gets one subscription per rule).
 */
function countListeners(q: Sql, emitter: string, ownerId: string): number {
  const count = (sql: string, params: string[]) => q.get(sql, params, (r) => r.n as number) ?? 0;
  const glob = `${emitter.slice(0, emitter.indexOf("_") + 1)}*`;
  const globs = count("SELECT count(*) AS n FROM subscriptions WHERE emitter_id = ? AND owner_id = ?", [
    glob,
    ownerId,
  ]);
  if (emitter !== glob)
    return globs + count("SELECT count(*) AS n FROM subscriptions WHERE emitter_id = ?", [emitter]);
  const table = glob === "dc_*" ? "sources" : "workflows";
  const busiest = count(
    `SELECT coalesce(max(c), 0) AS n FROM (SELECT count(*) AS c FROM subscriptions s JOIN ${table} e ON e.id = s.emitter_id
     WHERE e.owner_id = ? GROUP BY s.emitter_id)`,
    [ownerId],
  );
  const rules = count("SELECT count(*) AS n FROM auto_subscriptions WHERE owner_id = ?", [ownerId]);
  return globs + Math.max(busiest, rules);
}
