/**
 * The SQLite side of guaranteed delivery: the deliveries outbox and its attempts (the workflows it
 * delivers to are in workflows.ts, subscription matching in subscriptions.ts). A claim is a bounded walk
 * of the due index and an UPDATE of the rows it takes, made under the driver's lock.
 */
import type { DeliveryAttempt } from "../../domain/types.ts";
import { attemptColumnNames, attemptRowValues, attemptSelect, firstAttemptSelect } from "../attempt-rows.ts";
import type { DeliveryOps } from "../concerns.ts";
import { type DeliveryPatch, defaultClaimLeaseMs } from "../port.ts";
import { deliveryPatchParams, toAttempt, toDelivery } from "../rows.ts";
import { listenerInactive, type OutboxWrites } from "./outbox-writes.ts";
import { limitParam, type Row } from "./rows.ts";
import { placeholders, type Sql } from "./sql.ts";

/**
 * Pending deliveries of an inactive listener are parked: no due time, so they stay out of the index
 * that claims walk (a claim then never steps over the backlog of a webhook that a 410 disabled). This
 * expression gives the due time `?` unless the row's listener is inactive.
 */
const dueUnlessParked = (listener: string) => `CASE WHEN ${listenerInactive(listener)} THEN NULL ELSE ? END`;

/** Item `i` of a delivery's first attempt (migration 023), for `firstAttemptSelect`. */
const firstAttemptItem = (i: number) => `json_extract(first_attempt, '$[${i}]')`;

/**
 * The condition of the subscription index (migration 023): pending deliveries to sources, and those of
 * replays, the rows its two reads look for. A statement that means to use the index states it, word for
 * word, of the table's alias `t`: SQLite uses a partial index only for a WHERE that contains its condition.
 */
export const orderedPending = (t: string) =>
  `${t}.status = 'pending' AND (substr(${t}.listener_id, 1, 3) = 'dc_' OR substr(${t}.subscription_id, 1, 4) = 'rpl_')`;

const plainDelivery = (r: Row) => {
  const { seq: _seq, ...rest } = toDelivery(r);
  return rest;
};

/** Parks the pending deliveries of a listener made inactive; makes parked ones due at `nowMs` when active. */
export function parkDeliveries(q: Sql, listenerId: string, active: boolean, nowMs: number): void {
  if (active) {
    q.run(
      "UPDATE deliveries SET next_attempt_ms = ? WHERE listener_id = ? AND status = 'pending' AND next_attempt_ms IS NULL",
      [nowMs, listenerId],
    );
  } else {
    q.run("UPDATE deliveries SET next_attempt_ms = NULL WHERE listener_id = ? AND status = 'pending'", [
      listenerId,
    ]);
  }
}

export function deliveryOps(q: Sql, outbox: OutboxWrites): DeliveryOps {
  const updateDelivery = (id: string, p: DeliveryPatch): boolean =>
    q.run(
      `UPDATE deliveries SET status = ?, attempts = ?, round_attempts = ?, next_attempt_ms = ${dueUnlessParked("listener_id")}, last_status_code = ?,
           last_error = ?, last_duration_ms = ?, updated_ms = ?, claimed_by = NULL, claimed_until = NULL WHERE id = ?`,
      deliveryPatchParams(id, p),
    ) > 0;
  const insertDeliveryAttempt = (a: DeliveryAttempt): void => {
    q.run(
      `INSERT INTO delivery_attempts (${attemptColumnNames.join(", ")}) VALUES (${placeholders(attemptColumnNames)})`,
      attemptRowValues(a),
    );
  };
  return {
    // Held to the end of a transaction and written with its other outbox writes (outbox-writes.ts).
    insertDeliveries: async (deliveries) => outbox.insert(deliveries),

    getDelivery: async (id) => q.get("SELECT * FROM deliveries WHERE id = ?", [id], plainDelivery),

    claimDeliveries: async (c) => {
      if (c.limit <= 0) return [];
      // The index of unclaimed due rows is walked in order and the walk stops after a bounded page, so
      // that a claim costs the rows it looks at and not the whole backlog (a window over every pending row
      // made each claim O(backlog): a backlog then made claims slower until delivery collapsed). Busy
      // listeners are skipped in the index itself, which holds the listener (migration 015): their rows
      // are passed over without being read, and do not count toward the page. Inactive listeners need no
      // test here: every write of a due time goes through `dueUnlessParked`, and deactivating a listener
      // parks its pending rows (no due time).
      const except = new Set(c.exceptListeners);
      // `NOT IN ()` is not SQL, and `NOT IN (NULL)` matches nothing: leave the clause out when empty.
      const notIn = except.size > 0 ? `AND d.listener_id NOT IN (${placeholders(c.exceptListeners)})` : "";
      const scan = c.scanLimit ?? c.limit + c.perListener * 8;
      // A source's deliveries go one at a time, in order: none while an older one of its subscription is
      // pending and attempted or due. An older delivery not yet due for its first attempt (a
      // `delivery_ts` in the future) is scheduled, not queued: later events of the subscription go ahead of it.
      // The kind is read from the listener's ID (`dc_` for a source, as routing names it), which the
      // claims' index holds: a webhook's candidate is then answered by the index alone, where reading
      // `listener_kind` (and the ID) from the table made each row of the page a seek of its own.
      // The older deliveries are those of the same subscription, so of the same source: named in the
      // words of the subscription index's condition, which holds only such rows (migration 023).
      const inOrder = `(substr(d.listener_id, 1, 3) <> 'dc_' OR NOT EXISTS (
           SELECT 1 FROM deliveries e WHERE e.subscription_id = d.subscription_id AND ${orderedPending("e")} AND e.seq < d.seq
             AND (e.attempts > 0 OR e.next_attempt_ms IS NULL OR e.next_attempt_ms <= ?)))`;
      const notInParams = notIn ? c.exceptListeners : [];
      const toCandidate = (r: Row) => ({
        listenerId: r.listener_id as string,
        due: r.next_attempt_ms as number,
        seq: r.seq as number,
      });
      // Unclaimed due rows, through their own index (migration 015): the rows in flight are not in it.
      const candidates = q.all(
        `SELECT d.listener_id, d.next_attempt_ms, d.seq FROM deliveries d INDEXED BY deliveries_claimable
       WHERE d.status = 'pending' AND d.claimed_by IS NULL AND d.next_attempt_ms <= ? ${notIn} AND ${inOrder}
       ORDER BY d.next_attempt_ms, d.seq
       ${limitParam}`,
        [c.nowMs, ...notInParams, c.nowMs, scan],
        toCandidate,
      );
      // Claimed rows whose lease ran out (their node died or lost the store): read from the claimed
      // index, which holds only the rows in flight (a few hundred per node) with their lease.
      const expired = q.all(
        `SELECT d.listener_id, d.next_attempt_ms, d.seq FROM deliveries d INDEXED BY deliveries_claimed
       WHERE d.claimed_by IS NOT NULL AND (d.claimed_until IS NULL OR d.claimed_until <= ?)
         AND d.status = 'pending' AND d.next_attempt_ms <= ? ${notIn} AND ${inOrder}
       ${limitParam}`,
        [c.nowMs, c.nowMs, ...notInParams, c.nowMs, scan],
        toCandidate,
      );
      if (expired.length > 0) {
        candidates.push(...expired);
        candidates.sort((a, b) => a.due - b.due || a.seq - b.seq);
      }
      // What other claimers hold under a live lease counts against each listener's cap (the limit holds
      // for all nodes together). Claimed rows are few and found through their partial index, named here:
      // left to choose, SQLite walks the listener index for the GROUP BY, which reads every delivery kept
      // (each claim then cost 4 ms with 20,000 deliveries kept, and most of a delivery's CPU).
      const taken = new Map<string, number>(
        q.all(
          `SELECT listener_id, count(*) AS n FROM deliveries INDEXED BY deliveries_claimed
         WHERE claimed_by IS NOT NULL AND claimed_by <> ? AND claimed_until > ? GROUP BY listener_id`,
          [c.claimToken, c.nowMs],
          (r) => [r.listener_id as string, Number(r.n)] as const,
        ),
      );
      const seqs: number[] = [];
      for (const d of candidates) {
        if (except.has(d.listenerId)) continue;
        const n = taken.get(d.listenerId) ?? 0;
        if (n >= Math.min(c.perListener, c.room?.[d.listenerId] ?? c.perListener)) continue;
        taken.set(d.listenerId, n + 1);
        seqs.push(d.seq);
        if (seqs.length >= c.limit) break;
      }
      if (seqs.length === 0) return [];
      // One statement takes the rows (by rowid) and reads them back (RETURNING comes in no particular order).
      const rows = q.all(
        `UPDATE deliveries SET claimed_by = ?, claimed_until = ? WHERE seq IN (${placeholders(seqs)}) RETURNING *`,
        [c.claimToken, c.leaseUntilMs ?? c.nowMs + defaultClaimLeaseMs, ...seqs],
        (r) => r,
      );
      rows.sort(
        (a, b) =>
          (a.next_attempt_ms as number) - (b.next_attempt_ms as number) ||
          (a.seq as number) - (b.seq as number),
      );
      return rows.map(plainDelivery);
    },

    releaseDeliveries: async (ids, token) => {
      if (ids.length === 0) return;
      q.run(
        `UPDATE deliveries SET claimed_by = NULL, claimed_until = NULL WHERE claimed_by = ? AND id IN (${placeholders(ids)})`,
        [token, ...ids],
      );
    },

    resetDeliveryClaims: async (token) =>
      q.run("UPDATE deliveries SET claimed_by = NULL, claimed_until = NULL WHERE claimed_by = ?", [token]),

    renewDeliveryClaims: async (token, untilMs, ids) => {
      if (ids.length === 0) return 0;
      return q.run(
        `UPDATE deliveries SET claimed_until = ? WHERE claimed_by = ? AND id IN (${placeholders(ids)})`,
        [untilMs, token, ...ids],
      );
    },

    updateDelivery: async (id, p) => updateDelivery(id, p),

    insertDeliveryAttempt: async (a) => insertDeliveryAttempt(a),

    // Held like the inserts: a group commit's settlements are one UPDATE and their attempts one INSERT.
    settleDelivery: async (id, p, a) => outbox.settleDelivery(id, p, a),

    listDeliveries: async (listenerId, page, status) =>
      status === undefined
        ? q.page("deliveries", "listener_id = ?", [listenerId], page, toDelivery)
        : q.page("deliveries", "listener_id = ? AND status = ?", [listenerId, status], page, toDelivery),

    listDeliveryAttempts: async (deliveryIds, responseChars) => {
      if (deliveryIds.length === 0) return [];
      // A delivery's first attempt is in its row unless it was stored before migration 023 (or apart
      // from a settlement, `insertDeliveryAttempt`): never in both.
      const ids = placeholders(deliveryIds);
      return q.all(
        `SELECT ${attemptSelect(responseChars)} FROM delivery_attempts WHERE delivery_id IN (${ids})
         UNION ALL
         SELECT ${firstAttemptSelect(firstAttemptItem, responseChars)} FROM deliveries WHERE id IN (${ids}) AND first_attempt IS NOT NULL
         ORDER BY delivery_id, n`,
        [...deliveryIds, ...deliveryIds],
        toAttempt,
      );
    },

    cancelDeliveries: async (listenerId, ids) => {
      if (ids.length === 0) return 0;
      return q.run(
        `DELETE FROM deliveries WHERE listener_id = ? AND status = 'pending' AND claimed_by IS NULL AND id IN (${placeholders(ids)})`,
        [listenerId, ...ids],
      );
    },

    requeueDelivery: async (id, nowMs) =>
      q.run(
        `UPDATE deliveries SET status = 'pending', round_attempts = 0, next_attempt_ms = ${dueUnlessParked("listener_id")}, updated_ms = ?
         WHERE id = ? AND claimed_by IS NULL`,
        [nowMs, nowMs, id],
      ) > 0,

    requeueFailedDeliveries: async (listenerId, sinceMs, nowMs) =>
      q.run(
        `UPDATE deliveries SET status = 'pending', round_attempts = 0, next_attempt_ms = ${dueUnlessParked("listener_id")}, updated_ms = ?
       WHERE listener_id = ? AND status = 'failed' AND created_ms >= ?`,
        [nowMs, nowMs, listenerId, sinceMs],
      ),

    nextDeliveryMs: async () =>
      q.get(
        "SELECT min(next_attempt_ms) AS m FROM deliveries WHERE status = 'pending' AND claimed_by IS NULL",
        [],
        (r) => (r.m as number | null) ?? undefined,
      ),

    // Unclaimed pending rows are counted in their index, claimed ones (all pending) in theirs.
    countPendingDeliveries: async (nowMs) =>
      q.get(
        `SELECT
           (SELECT count(*) FROM deliveries INDEXED BY deliveries_claimable WHERE status = 'pending' AND claimed_by IS NULL)
           + (SELECT count(*) FROM deliveries INDEXED BY deliveries_claimed WHERE claimed_by IS NOT NULL AND status = 'pending') AS pending,
           (SELECT count(*) FROM deliveries INDEXED BY deliveries_claimable
              WHERE status = 'pending' AND claimed_by IS NULL AND next_attempt_ms <= ?)
           + (SELECT count(*) FROM deliveries INDEXED BY deliveries_claimed
              WHERE claimed_by IS NOT NULL AND status = 'pending' AND next_attempt_ms <= ?) AS due`,
        [nowMs, nowMs],
        (r) => ({ pending: Number(r.pending), due: Number(r.due) }),
      )!,

    pruneDeliveries: async (beforeMs) =>
      q.run("DELETE FROM deliveries WHERE status <> 'pending' AND updated_ms < ?", [beforeMs]),
  };
}
