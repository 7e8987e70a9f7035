/**
 * The deliveries outbox and its attempts. Claims are one statement that locks the rows it takes with
 * `FOR UPDATE SKIP LOCKED`, so dispatchers of several processes never take the same delivery; a claim
 * holds under a lease its node renews, and a lease that ran out (the node died) frees the row.
 */
import type { Delivery } from "../../domain/types.ts";
import {
  attemptColumnNames,
  attemptRowValues,
  attemptSelect,
  firstAttemptSelect,
  firstAttemptText,
} from "../attempt-rows.ts";
import type { DeliveryOps } from "../concerns.ts";
import { defaultClaimLeaseMs } from "../port.ts";
import { deliveryPatchParams, deliveryRowValues, toAttempt, toDelivery } from "../rows.ts";
import { subscriptionKept } from "../subscription-deletes.ts";
import { textsBySize } from "../texts-by-size.ts";
import { alive } from "./cluster.ts";
import type { Row, Sql } from "./sql.ts";

/** True when the listener `listener` (a column or parameter) is a webhook or source made inactive. */
const listenerInactive = (listener: string) =>
  `(EXISTS (SELECT 1 FROM webhooks w WHERE w.id = ${listener} AND NOT w.active)
    OR EXISTS (SELECT 1 FROM sources s WHERE s.id = ${listener} AND NOT s.active))`;

/**
 * Pending deliveries of an inactive listener are parked: no due time, so they stay out of the due index
 * that claims walk. This expression gives the due time `due` unless the row's listener is inactive.
 */
const dueUnlessParked = (listener: string, due: string) =>
  `CASE WHEN ${listenerInactive(listener)} THEN NULL ELSE ${due}::bigint END`;

/** The types of `delivery_attempts`' columns, for the first attempts read from their deliveries' rows. */
const attemptColumnTypes: Record<string, string> = {
  started_ms: "bigint",
  duration_ms: "bigint",
  status_code: "int",
  response_truncated: "int::boolean",
};

/** Item `i` of a delivery's first attempt (migration 023), cast to column `column`'s type, for `firstAttemptSelect`. */
const firstAttemptItem = (i: number, column: string) => {
  const text = `(first_attempt::jsonb ->> ${i})`;
  const type = attemptColumnTypes[column];
  return type ? `${text}::${type}` : text;
};

/**
 * The condition of the subscription index (migration 023): pending deliveries to sources, and those of
 * replays, the rows its two reads look for. A statement that means to use the index states it, of the
 * table's alias `t`, so that the planner sees that the index holds every row it asks for.
 */
export const orderedPending = (t: string) =>
  `${t}.status = 'pending' AND (${t}.listener_kind = 'source' OR substr(${t}.subscription_id, 1, 4) = 'rpl_')`;

const plainDelivery = (r: Row): Delivery => {
  const { seq: _seq, ...rest } = toDelivery(r);
  return rest;
};

/** Columns of an inserted delivery with their types, in `deliveryRowValues` order. */
const insertColumns: Array<[name: string, type: string]> = [
  ["id", "text"],
  ["owner_id", "text"],
  ["subscription_id", "text"],
  ["emitter_id", "text"],
  ["event_id", "text"],
  ["channel", "text"],
  ["listener_id", "text"],
  ["listener_kind", "text"],
  ["event_json", "text"],
  ["meta_json", "text"],
  ["indexed_at_ms", "bigint"],
  ["hops", "int"],
  ["status", "text"],
  ["attempts", "int"],
  ["round_attempts", "int"],
  ["next_attempt_ms", "bigint"],
  ["last_status_code", "int"],
  ["last_error", "text"],
  ["last_duration_ms", "bigint"],
  ["claimed_by", "text"],
  ["created_ms", "bigint"],
  ["updated_ms", "bigint"],
  ["claimed_until", "bigint"],
  ["trace_context", "text"],
];

/** Rows per INSERT: 24 parameters each stays far below PostgreSQL's 65,535 per statement. */
const insertChunk = 500;

/**
 * The claim in one statement: due candidates in due order (unclaimed, or claimed under a lease that ran
 * out); then at most `cap` per listener (the per-destination limit, or the room a busy one has left, less
 * what other nodes hold of it under a live lease) and `limit` in all; those are locked, skipped when
 * another claim holds or took them, marked with the claim token and lease, and returned.
 */
const claimSqlOf = (skipBusyInScan: boolean) => {
  const claimable = `d.status = 'pending' AND d.next_attempt_ms <= $1
    ${skipBusyInScan ? "AND NOT (d.listener_id = ANY($2::text[]))" : ""}
    AND (d.listener_kind <> 'source' OR NOT EXISTS (
      SELECT 1 FROM deliveries e
      WHERE e.subscription_id = d.subscription_id AND ${orderedPending("e")} AND e.seq < d.seq
        -- An older delivery not yet due for its first attempt (a \`delivery_ts\` in the future) is
        -- scheduled, not queued: later events of the subscription go ahead of it.
        AND (e.attempts > 0 OR e.next_attempt_ms IS NULL OR e.next_attempt_ms <= $1)))
    -- Several nodes: a source another live node runs (holds the run lease of) is left to that node.
    AND (d.listener_kind <> 'source' OR $9::text IS NULL OR NOT EXISTS (
      SELECT 1 FROM source_leases l JOIN nodes n ON n.id = l.node_id
      WHERE l.source_id = d.listener_id AND l.node_id <> $9::text
        AND ${alive("n.heartbeat_ms", "$10::bigint")}))
    -- A deleted subscription's rows, left to batches (subscription-deletes.ts), are passed over.
    AND ${subscriptionKept("d")}`;
  return `
WITH candidates AS (
  -- Nobody's: the claimable index holds only these, so the rows in flight are not walked again.
  (SELECT d.id, d.listener_id, d.next_attempt_ms, d.seq FROM deliveries d
   WHERE d.claimed_by IS NULL AND ${claimable}
   ORDER BY d.next_attempt_ms, d.seq LIMIT $3)
  UNION ALL
  -- Claimed by a node whose lease ran out (it died): found by the lease's index, usually none.
  (SELECT d.id, d.listener_id, d.next_attempt_ms, d.seq FROM deliveries d
   WHERE d.claimed_by IS NOT NULL AND (d.claimed_until IS NULL OR d.claimed_until <= $1) AND ${claimable}
   ORDER BY d.next_attempt_ms, d.seq LIMIT $3)
), others AS (
  -- Claimed rows are few (what dispatchers hold in memory), found through their partial index.
  SELECT listener_id, count(*)::int AS n FROM deliveries
  WHERE claimed_by IS NOT NULL AND claimed_by <> $7 AND claimed_until > $1
  GROUP BY listener_id
), ranked AS (
  SELECT c.id, c.next_attempt_ms, c.seq,
    row_number() OVER (PARTITION BY c.listener_id ORDER BY c.next_attempt_ms, c.seq) AS k,
    LEAST($4::int, COALESCE(($5::jsonb ->> c.listener_id)::int, $4::int)) - COALESCE(o.n, 0) AS cap
  FROM candidates c LEFT JOIN others o ON o.listener_id = c.listener_id
  WHERE NOT (c.listener_id = ANY($2::text[]))
), chosen AS (
  SELECT id FROM ranked WHERE k <= cap ORDER BY next_attempt_ms, seq LIMIT $6
), locked AS (
  -- Only the chosen rows are locked; one another claimer holds, or took since this statement began
  -- (the lock reads the row's newest version against these conditions), is left to it.
  -- By ID: as a join, the planner read every pending row to match the few chosen.
  SELECT d.id FROM deliveries d
  WHERE d.id = ANY(ARRAY(SELECT id FROM chosen)) AND d.status = 'pending'
    AND (d.claimed_by IS NULL OR d.claimed_until IS NULL OR d.claimed_until <= $1)
  FOR UPDATE OF d SKIP LOCKED
)
UPDATE deliveries d SET claimed_by = $7, claimed_until = $8 FROM locked WHERE d.id = locked.id
RETURNING d.*`;
};

/** The claim's two statements, prepared under these names (see `claimDeliveries`). */
const claimStatements = {
  all: { name: "fount_claim", text: claimSqlOf(false) },
  skippingBusy: { name: "fount_claim_skipping_busy", text: claimSqlOf(true) },
};

/**
 * Parks up to `limit` of an inactive listener's unclaimed due deliveries, soonest due first from past
 * `after`, through the claims' index: each batch starts where the last one stopped, so a backlog is walked
 * once whatever else is due. Rows a claim is taking now are left to it (they are parked when released).
 */
const parkSql = `WITH c AS (
    SELECT seq, next_attempt_ms FROM deliveries
     WHERE status = 'pending' AND claimed_by IS NULL AND (next_attempt_ms, seq) > ($2::bigint, $3::bigint)
       AND listener_id = $1 AND ${listenerInactive("$1::text")}
     ORDER BY next_attempt_ms, seq LIMIT $4 FOR UPDATE SKIP LOCKED),
  u AS (UPDATE deliveries d SET next_attempt_ms = NULL FROM c WHERE d.seq = c.seq)
  SELECT seq, next_attempt_ms, count(*) OVER () AS n FROM c ORDER BY next_attempt_ms DESC, seq DESC LIMIT 1`;

/** The condition of a listener's deliveries of one status: a source's pending ones through their index (027). */
const listedByStatus = (listenerId: string, status: string) =>
  status === "pending" && listenerId.startsWith("dc_")
    ? "listener_id = $1 AND status = $2 AND status = 'pending' AND substr(listener_id, 1, 3) = 'dc_'"
    : "listener_id = $1 AND status = $2";

/** Parked rows (migration 026): pending, and no due time, as only an inactive listener's get. */
const parked = (t: string) => `${t}.status = 'pending' AND ${t}.next_attempt_ms IS NULL`;

/** A settlement's update of its delivery: the attempt's result, and the claim released. */
const updateSql = `UPDATE deliveries SET status = $1, attempts = $2, round_attempts = $3,
  next_attempt_ms = ${dueUnlessParked("listener_id", "$4")}, last_status_code = $5, last_error = $6,
  last_duration_ms = $7, updated_ms = $8, claimed_by = NULL, claimed_until = NULL
WHERE id = $9`;

const attemptColumns = `(${attemptColumnNames.join(", ")})`;
const attemptValues = `(${attemptColumnNames.map((c, i) => `$${i + 1}${c === "response_truncated" ? "::int::boolean" : ""}`).join(", ")})`;
const attemptParams = attemptRowValues;

/** `n` `VALUES` tuples of `width` placeholders each, numbered from $1. */
function tuplesOf(n: number, width: number): string {
  const tuples: string[] = [];
  for (let r = 0; r < n; r++)
    tuples.push(`(${Array.from({ length: width }, (_, i) => `$${r * width + i + 1}`).join(", ")})`);
  return tuples.join(", ");
}

/**
 * One INSERT of `deliveries`, each due unless its listener is inactive (parked). Selected from a VALUES
 * list, so that the parking test is one expression of the plan: written into each VALUES row, its two
 * subqueries were planned once per row, and planning the statement took as long as running it.
 */
function insertDeliveriesSql(deliveries: Delivery[]): { text: string; params: unknown[] } {
  // Each row carries its position: the rows are inserted in that order, so that their `seq` (which
  // orders a subscription's deliveries to a source) follows the order they were routed in.
  const params: unknown[] = [];
  for (let i = 0; i < deliveries.length; i++) params.push(...deliveryRowValues(deliveries[i]!), i);
  return { text: insertText(deliveries.length), params };
}

/** The text of `insertDeliveriesSql` for `n` deliveries. */
const insertText = textsBySize((n) => {
  const names = insertColumns.map(([name]) => name);
  const selected = insertColumns.map(([name, type]) =>
    name === "next_attempt_ms"
      ? dueUnlessParked("v.listener_id::text", "v.next_attempt_ms")
      : `v.${name}::${type}`,
  );
  return `INSERT INTO deliveries (${names.join(", ")})
      SELECT ${selected.join(", ")}
      FROM (VALUES ${tuplesOf(n, names.length + 1)}) AS v(${names.join(", ")}, position)
      ORDER BY v.position::int`;
});

/**
 * One UPDATE for settlements (`deliveryPatchParams` rows, then the first attempt's text or null): the
 * columns `updateSql` sets, from a VALUES list (cast, since a column of NULLs alone would be text), and
 * the first attempt (migration 023), unless one is kept already: only a second node sending the same
 * delivery after its lease ran out brings another, and the one stored first is kept, as before.
 */
function settleSql(rows: unknown[][]): { text: string; params: unknown[] } {
  return { text: settleText(rows.length), params: rows.flat() };
}

/** The text of `settleSql` for `n` settlements. */
const settleText = textsBySize(
  (n) => `UPDATE deliveries d SET status = v.status::text, attempts = v.attempts::int,
      round_attempts = v.round_attempts::int,
      next_attempt_ms = ${dueUnlessParked("d.listener_id", "v.next_attempt_ms")},
      last_status_code = v.last_status_code::int, last_error = v.last_error::text,
      last_duration_ms = v.last_duration_ms::bigint, updated_ms = v.updated_ms::bigint,
      claimed_by = NULL, claimed_until = NULL, first_attempt = coalesce(d.first_attempt, v.first_attempt::text)
    FROM (VALUES ${tuplesOf(n, 10)}) AS v(status, attempts, round_attempts, next_attempt_ms, last_status_code,
      last_error, last_duration_ms, updated_ms, id, first_attempt)
    WHERE d.id = v.id::text`,
);

/** One INSERT of attempts (`attemptParams` rows), leaving out those of deliveries deleted meanwhile. */
function attemptsSql(rows: unknown[][]): { text: string; params: unknown[] } {
  return { text: attemptsText(rows.length), params: rows.flat() };
}

/** The text of `attemptsSql` for `n` attempts. */
const attemptsText = textsBySize(
  (n) => `INSERT INTO delivery_attempts ${attemptColumns}
      SELECT v.delivery_id::text, v.n::int, v.started_ms::bigint, v.duration_ms::bigint,
        v.status_code::int, v.error::text, v.response::text, v.outcome::text, v.url::text,
        v.request_headers::text, v.response_headers::text, v.response_truncated::int::boolean,
        v.error_kind::text
      FROM (VALUES ${tuplesOf(n, attemptColumnNames.length)}) AS v${attemptColumns}
      WHERE EXISTS (SELECT 1 FROM deliveries WHERE id = v.delivery_id::text)`,
);

export function deliveryOps(q: Sql): DeliveryOps {
  return {
    // Inside a transaction, the deliveries its events route are inserted by one statement.
    insertDeliveries: async (deliveries) => {
      for (let start = 0; start < deliveries.length; start += insertChunk)
        await q.deferMerged("deliveries", deliveries.slice(start, start + insertChunk), (chunks) =>
          insertDeliveriesSql(chunks.flat()),
        );
    },

    getDelivery: (id) => q.get("SELECT * FROM deliveries WHERE id = $1", [id], plainDelivery),

    claimDeliveries: async (c) => {
      if (c.limit <= 0) return [];
      // With `scanLimit`, busy listeners' rows count toward the scan and are skipped after it, so that a
      // claim costs the same whatever their backlog (see the SQLite driver); without it they are
      // skipped in the scan itself.
      const bounded = c.scanLimit !== undefined;
      const scan = c.scanLimit ?? c.limit + c.perListener * 8;
      const claim =
        !bounded && c.exceptListeners.length > 0 ? claimStatements.skippingBusy : claimStatements.all;
      // Prepared: planning the claim took longer than running it (2.2 ms against 1.6 ms).
      const rows = await q.all(
        claim.text,
        [
          c.nowMs,
          c.exceptListeners,
          scan,
          c.perListener,
          JSON.stringify(c.room ?? {}),
          c.limit,
          c.claimToken,
          c.leaseUntilMs ?? c.nowMs + defaultClaimLeaseMs,
          c.member?.nodeId ?? null,
          c.member?.deadAfterMs ?? 0,
        ],
        toDelivery,
        claim.name,
      );
      rows.sort((a, b) => (a.nextAttemptMs ?? 0) - (b.nextAttemptMs ?? 0) || a.seq - b.seq);
      return rows.map(({ seq: _seq, ...rest }) => rest);
    },

    releaseDeliveries: async (ids, token) => {
      if (ids.length === 0) return;
      await q.run(
        `UPDATE deliveries SET claimed_by = NULL, claimed_until = NULL,
           next_attempt_ms = ${dueUnlessParked("listener_id", "next_attempt_ms")}
         WHERE claimed_by = $2 AND id = ANY($1::text[])`,
        [ids, token],
      );
    },

    resetDeliveryClaims: (token) =>
      q.run("UPDATE deliveries SET claimed_by = NULL, claimed_until = NULL WHERE claimed_by = $1", [token]),

    renewDeliveryClaims: async (token, untilMs, ids) =>
      ids.length === 0
        ? 0
        : q.run("UPDATE deliveries SET claimed_until = $2 WHERE claimed_by = $1 AND id = ANY($3::text[])", [
            token,
            untilMs,
            ids,
          ]),

    updateDelivery: async (id, p) => (await q.run(updateSql, deliveryPatchParams(id, p))) > 0,

    insertDeliveryAttempt: async (a) => {
      await q.run(
        `INSERT INTO delivery_attempts ${attemptColumns} VALUES ${attemptValues}`,
        attemptParams(a),
      );
    },

    // Held back in a transaction (one round trip per group commit), and merged there: a group commit's
    // settlements are one UPDATE and their attempts one INSERT, since held-back statements go as SQL
    // text, planned once each, and one per delivery cost more in planning than in running. The attempt
    // is stored only if the delivery still exists, as updateDelivery's answer would decide.
    // A first attempt goes into the delivery's row with the settlement (migration 023), a later one
    // into `delivery_attempts`.
    settleDelivery: async (id, p, a) => {
      const first = a?.n === 1 ? firstAttemptText(a) : null;
      const row: unknown[] = deliveryPatchParams(id, p);
      row.push(first);
      await q.deferMerged("settle", row, settleSql);
      if (a && first === null) await q.deferMerged("attempts", attemptParams(a), attemptsSql);
    },

    listDeliveries: (listenerId, page, status) =>
      status === undefined
        ? q.page("deliveries", "listener_id = $1", [listenerId], page, toDelivery)
        : q.page("deliveries", listedByStatus(listenerId, status), [listenerId, status], page, toDelivery),

    // A delivery's first attempt is in its row unless it was stored before migration 023 (or apart
    // from a settlement, `insertDeliveryAttempt`): never in both.
    listDeliveryAttempts: (deliveryIds, responseChars) =>
      q.all(
        `SELECT ${attemptSelect(responseChars)} FROM delivery_attempts WHERE delivery_id = ANY($1::text[])
         UNION ALL
         SELECT ${firstAttemptSelect(firstAttemptItem, responseChars)} FROM deliveries
         WHERE id = ANY($1::text[]) AND first_attempt IS NOT NULL
         ORDER BY delivery_id, n`,
        [deliveryIds],
        toAttempt,
      ),

    cancelDeliveries: (listenerId, ids) =>
      ids.length === 0
        ? Promise.resolve(0)
        : q.run(
            `DELETE FROM deliveries
             WHERE listener_id = $1 AND status = 'pending' AND claimed_by IS NULL AND id = ANY($2::text[])`,
            [listenerId, ids],
          ),

    requeueDelivery: async (id, nowMs) =>
      (await q.run(
        `UPDATE deliveries SET status = 'pending', round_attempts = 0,
           next_attempt_ms = ${dueUnlessParked("listener_id", "$1")}, updated_ms = $1
         WHERE id = $2 AND claimed_by IS NULL`,
        [nowMs, id],
      )) > 0,

    // Through the failed index (migration 025), a batch at a time; the listener a range of one, as in
    // `unparkDeliveries` (told `listener_id = $2`, the planner walked the primary key past every row
    // before the listener's failed ones: 243 ms a batch of 250 behind 600,000 others, once analyzed).
    requeueFailedDeliveries: async (listenerId, sinceMs, nowMs, page) => {
      const seqs = await q.all(
        `UPDATE deliveries SET status = 'pending', round_attempts = 0,
           next_attempt_ms = ${dueUnlessParked("listener_id", "$1")}, updated_ms = $1
         WHERE seq IN (SELECT seq FROM deliveries WHERE listener_id >= $2 AND listener_id <= $2 AND status = 'failed'
           AND seq > $3 AND created_ms >= $4 AND updated_ms <= $1 ORDER BY listener_id, seq LIMIT $5
           FOR UPDATE SKIP LOCKED)
         RETURNING seq`,
        [nowMs, listenerId, page.afterSeq ?? 0, sinceMs, page.limit],
        (r) => Number(r.seq),
      );
      return { requeued: seqs.length, lastSeq: seqs.length > 0 ? Math.max(...seqs) : undefined };
    },

    listUnparkableListeners: () =>
      // One seek per listener with parked rows (a skip scan), not a walk of all of them.
      q.all(
        `WITH RECURSIVE l(id) AS (
           SELECT (SELECT p.listener_id FROM deliveries p WHERE ${parked("p")} ORDER BY p.listener_id LIMIT 1)
           UNION ALL
           SELECT (SELECT p.listener_id FROM deliveries p WHERE ${parked("p")} AND p.listener_id > l.id
                   ORDER BY p.listener_id LIMIT 1)
             FROM l WHERE l.id IS NOT NULL)
         SELECT id FROM l WHERE id IS NOT NULL AND NOT ${listenerInactive("l.id")}`,
        [],
        (r) => r.id as string,
      ),

    parkDeliveries: async (listenerId, limit, after) => {
      const last = await q.get(
        parkSql,
        [listenerId, after?.ms ?? Number.MIN_SAFE_INTEGER, after?.seq ?? 0, limit],
        (r) => ({ n: Number(r.n), key: { ms: Number(r.next_attempt_ms), seq: Number(r.seq) } }),
      );
      return last ? { parked: last.n, last: last.key } : { parked: 0 };
    },

    // Rows another unparker holds now are left to it. The listener is a range of one, not an equality:
    // told `listener_id = $2`, the planner orders by seq alone and walks the primary key, taking parked
    // rows for spread evenly among all (every finished row has no due time either); it then read 600,000
    // rows to find 500 parked at the end (145 ms a batch, against 0.15 ms through their index).
    unparkDeliveries: (listenerId, nowMs, limit) =>
      q.run(
        `UPDATE deliveries SET next_attempt_ms = $1 WHERE seq IN (
           SELECT p.seq FROM deliveries p WHERE p.listener_id >= $2 AND p.listener_id <= $2 AND ${parked("p")}
             AND NOT ${listenerInactive("$2::text")} ORDER BY p.listener_id, p.seq LIMIT $3 FOR UPDATE SKIP LOCKED)`,
        [nowMs, listenerId, limit],
      ),

    countPendingDeliveries: async (nowMs) =>
      (await q.get(
        `SELECT count(*) AS pending, count(*) FILTER (WHERE next_attempt_ms <= $1) AS due
         FROM deliveries WHERE status = 'pending'`,
        [nowMs],
        (r) => ({ pending: Number(r.pending), due: Number(r.due) }),
      ))!,

    nextDeliveryMs: async () =>
      (await q.get(
        "SELECT min(next_attempt_ms) AS m FROM deliveries WHERE status = 'pending' AND claimed_by IS NULL",
        [],
        (r) => r.m as number | null,
      )) ?? undefined,

    // `limit` at a time, the oldest first; rows another node is deleting now are left to it.
    pruneDeliveries: (beforeMs, limit) =>
      q.run(
        `DELETE FROM deliveries WHERE seq IN (SELECT seq FROM deliveries
           WHERE status <> 'pending' AND updated_ms < $1 ORDER BY updated_ms LIMIT $2 FOR UPDATE SKIP LOCKED)`,
        [beforeMs, limit],
      ),
  };
}
