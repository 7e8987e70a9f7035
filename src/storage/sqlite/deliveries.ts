/**
 * The SQLite side of guaranteed delivery: the deliveries outbox and its attempts (the workflows it
 * delivers to are in workflows.ts, subscription matching in subscriptions.ts). A claim is a bounded walk
 * of the due index and an UPDATE of the rows it takes, made under the driver's lock.
 */
import type { DeliveryAttempt } from "../../domain/types.ts";
import { attemptColumnNames, attemptRowValues, attemptSelect, firstAttemptSelect } from "../attempt-rows.ts";
import type { DeliveryOps } from "../concerns.ts";
import { type DeliveryPatch, type DueKey, defaultClaimLeaseMs } from "../port.ts";
import { deliveryPatchParams, toAttempt, toDelivery } from "../rows.ts";
import { subscriptionKept } from "../subscription-deletes.ts";
import { listenerInactive, type OutboxWrites } from "./outbox-writes.ts";
import { limitParam, type Row } from "./rows.ts";
import { placeholders, type Sql } from "./sql.ts";

/**
 * Pending deliveries of an inactive listener are parked: no due time, so they stay out of the index
 * that claims walk (a claim then never steps over the backlog of a webhook that a 410 disabled). This
 * expression gives the due time `due` (by default the bound `?`) unless the row's listener is inactive.
 */
const dueUnlessParked = (listener: string, due = "?") =>
  `CASE WHEN ${listenerInactive(listener)} THEN NULL ELSE ${due} END`;

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

/**
 * Parks up to `limit` of an inactive listener's unclaimed due deliveries, soonest due first from past
 * `after`, through the claims' index (which holds the listener): each batch starts where the last one
 * stopped, so a backlog is walked once whatever else is due. One statement for all of them held the event
 * loop for 281 ms with 100,000 due; the dispatcher now goes in batches (docs/delivery.md, *Inactive
 * listeners*).
 */
export function parkDeliveries(
  q: Sql,
  listenerId: string,
  limit: number,
  after: DueKey | undefined,
): { parked: number; last?: DueKey } {
  if (!q.get(`SELECT ${listenerInactive("?")} AS i`, [listenerId, listenerId], (r) => r.i === 1))
    return { parked: 0 };
  const rows = q.all(
    `SELECT seq, next_attempt_ms FROM deliveries INDEXED BY deliveries_claimable
       WHERE status = 'pending' AND claimed_by IS NULL AND (next_attempt_ms, seq) > (?, ?) AND listener_id = ?
       ORDER BY next_attempt_ms, seq ${limitParam}`,
    [after?.ms ?? Number.MIN_SAFE_INTEGER, after?.seq ?? 0, listenerId, limit],
    (r) => ({ ms: r.next_attempt_ms as number, seq: r.seq as number }),
  );
  if (rows.length === 0) return { parked: 0 };
  q.run(
    `UPDATE deliveries SET next_attempt_ms = NULL WHERE seq IN (${placeholders(rows)})`,
    rows.map((r) => r.seq),
  );
  return { parked: rows.length, last: rows[rows.length - 1] };
}

/**
 * The condition of a listener's deliveries of one status (bound second). A source's pending ones are
 * read through their own index (migration 026), whose condition the statement states word for word.
 */
const listedByStatus = (listenerId: string, status: string) =>
  status === "pending" && listenerId.startsWith("dc_")
    ? "listener_id = ? AND status = ? AND status = 'pending' AND substr(listener_id, 1, 3) = 'dc_'"
    : "listener_id = ? AND status = ?";

/** Parked rows (migration 025): pending, and no due time, as only an inactive listener's get. */
const parked = (t: string) => `${t}.status = 'pending' AND ${t}.next_attempt_ms IS NULL`;

/**
 * The pending deliveries and those of them due at `nowMs` (`/metrics`): unclaimed pending rows counted
 * in their index, claimed ones (all pending) in theirs. The store's own `countPendingDeliveries` runs it
 * on a search thread (search-threads.ts): a backlog of a million walks a million index entries twice.
 */
export function countBacklog(q: Sql, nowMs: number): { pending: number; due: number } {
  return q.get(
    `SELECT
       (SELECT count(*) FROM deliveries INDEXED BY deliveries_claimable WHERE status = 'pending' AND claimed_by IS NULL)
       + (SELECT count(*) FROM deliveries INDEXED BY deliveries_claimed WHERE claimed_by IS NOT NULL AND status = 'pending') AS pending,
       (SELECT count(*) FROM deliveries INDEXED BY deliveries_claimable
          WHERE status = 'pending' AND claimed_by IS NULL AND next_attempt_ms <= ?)
       + (SELECT count(*) FROM deliveries INDEXED BY deliveries_claimed
          WHERE claimed_by IS NOT NULL AND status = 'pending' AND next_attempt_ms <= ?) AS due`,
    [nowMs, nowMs],
    (r) => ({ pending: Number(r.pending), due: Number(r.due) }),
  )!;
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
      // test here: every write of a due time goes through `dueUnlessParked`, a listener made inactive has
      // its due rows parked in batches (`parkDeliveries`), and a claim that took one meanwhile gives it
      // back parked (`releaseDeliveries`).
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
      // words of the subscription index's condition, which holds only such rows (migration 023). A deleted
      // subscription's rows, left to batches (subscription-deletes.ts), are passed over.
      const inOrder = `(substr(d.listener_id, 1, 3) <> 'dc_' OR NOT EXISTS (
           SELECT 1 FROM deliveries e WHERE e.subscription_id = d.subscription_id AND ${orderedPending("e")} AND e.seq < d.seq
             AND (e.attempts > 0 OR e.next_attempt_ms IS NULL OR e.next_attempt_ms <= ?)))
         AND ${subscriptionKept("d")}`;
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
        `UPDATE deliveries SET claimed_by = NULL, claimed_until = NULL,
           next_attempt_ms = ${dueUnlessParked("listener_id", "next_attempt_ms")}
         WHERE claimed_by = ? AND id IN (${placeholders(ids)})`,
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
        : q.page("deliveries", listedByStatus(listenerId, status), [listenerId, status], page, toDelivery),

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

    // Through the failed index (migration 024): one statement for 300,000 held the event loop 3.1 s.
    requeueFailedDeliveries: async (listenerId, sinceMs, nowMs, page) => {
      const seqs = q.all(
        `UPDATE deliveries SET status = 'pending', round_attempts = 0, next_attempt_ms = ${dueUnlessParked("listener_id")}, updated_ms = ?
         WHERE seq IN (SELECT seq FROM deliveries WHERE listener_id = ? AND status = 'failed' AND seq > ?
           AND created_ms >= ? AND updated_ms <= ? ORDER BY seq ${limitParam})
         RETURNING seq`,
        [nowMs, nowMs, listenerId, page.afterSeq ?? 0, sinceMs, nowMs, page.limit],
        (r) => r.seq as number,
      );
      return { requeued: seqs.length, lastSeq: seqs.length > 0 ? Math.max(...seqs) : undefined };
    },

    listUnparkableListeners: async () =>
      // One seek per listener with parked rows (a skip scan), not a walk of all of them.
      q.all(
        `WITH RECURSIVE l(id) AS (
           SELECT (SELECT p.listener_id FROM deliveries p INDEXED BY deliveries_parked WHERE ${parked("p")}
                   ORDER BY p.listener_id LIMIT 1)
           UNION ALL
           SELECT (SELECT p.listener_id FROM deliveries p INDEXED BY deliveries_parked
                   WHERE ${parked("p")} AND p.listener_id > l.id ORDER BY p.listener_id LIMIT 1)
             FROM l WHERE l.id IS NOT NULL)
         SELECT id FROM l WHERE id IS NOT NULL AND NOT ${listenerInactive("l.id")}`,
        [],
        (r) => r.id as string,
      ),

    parkDeliveries: async (listenerId, limit, after) => parkDeliveries(q, listenerId, limit, after),

    unparkDeliveries: async (listenerId, nowMs, limit) =>
      q.run(
        `UPDATE deliveries SET next_attempt_ms = ? WHERE seq IN (
           SELECT p.seq FROM deliveries p INDEXED BY deliveries_parked WHERE p.listener_id = ? AND ${parked("p")}
             AND NOT ${listenerInactive("p.listener_id")} ORDER BY p.seq ${limitParam})`,
        [nowMs, listenerId, limit],
      ),

    nextDeliveryMs: async () =>
      q.get(
        "SELECT min(next_attempt_ms) AS m FROM deliveries WHERE status = 'pending' AND claimed_by IS NULL",
        [],
        (r) => (r.m as number | null) ?? undefined,
      ),

    countPendingDeliveries: async (nowMs) => countBacklog(q, nowMs),

    // The oldest through the finished index, `limit` at a time: one statement for an hour's deliveries
    // held the event loop for seconds (300,000 took 1.4 s).
    pruneDeliveries: async (beforeMs, limit) =>
      q.run(
        `DELETE FROM deliveries WHERE seq IN (SELECT seq FROM deliveries
           WHERE status <> 'pending' AND updated_ms < ? ORDER BY updated_ms ${limitParam})`,
        [beforeMs, limit],
      ),
  };
}
