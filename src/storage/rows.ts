/**
 * Rows to domain records, shared by both drivers: their tables have the same columns, so a row reads
 * the same in each. The one difference is booleans (SQLite stores 0/1, PostgreSQL `boolean`), which
 * `flag` reads either way.
 */
import type {
  ApiKey,
  AppAccount,
  AutoSubscription,
  ComponentRecord,
  Delivery,
  DeliveryAttempt,
  DeliveryStatus,
  EventRecord,
  Org,
  SessionRecord,
  SourceRecord,
  Subscription,
  TimerRecord,
  User,
  Webhook,
  WithSeq,
  Workflow,
} from "../domain/types.ts";
import { toAttemptDetail } from "./attempt-rows.ts";
import type { DeliveryPatch } from "./port.ts";

/** A row as either driver returns it. */
export type Row = Record<string, unknown>;

/**
 * Tables that hold ID-addressed resources with an owner, by ID prefix, for `resourceOwner` in both
 * drivers. Later migrations add kinds here.
 */
export const ownedTables: Readonly<Record<string, string>> = {
  wh: "webhooks",
  sub: "subscriptions",
  sc: "components",
  dc: "sources",
  apn: "app_accounts",
  p: "workflows",
  del: "deliveries",
};

/** The owner of the source, webhook or workflow whose ID `column` holds (NULL for a glob, or one gone). */
export const ownerOf = (column: string): string =>
  `coalesce(${[ownedTables.dc, ownedTables.wh, ownedTables.p].map((t) => `(SELECT owner_id FROM ${t} WHERE id = ${column})`).join(", ")})`;

/**
 * The statements of `deleteRoutesBetween`, for both drivers (`p1`, `p2`: their placeholders of the two
 * tenants; `hint`: SQLite's `INDEXED BY` for an index, empty for PostgreSQL). A subscription's ends are
 * owned by a source, webhook or workflow (a glob emitter by none). A delivery between them is one owned
 * by either whose emitter or listener is the other's; what was not delivered goes, through the partial
 * indexes of each state: pending (unclaimed, or claimed: its settlement then finds no row), and failed
 * (which could be redelivered).
 */
export function routesBetween(p1: string, p2: string, hint: (index: string) => string): string[] {
  const namesOther = (owner: string, other: string, columns: string[]) =>
    `(owner_id = ${owner} AND ${other} IN (${columns.map(ownerOf).join(", ")}))`;
  const either = (columns: string[]) => `(${namesOther(p1, p2, columns)} OR ${namesOther(p2, p1, columns)})`;
  const ends = either(["emitter_id", "listener_id"]);
  const listeners = [ownedTables.wh, ownedTables.dc, ownedTables.p]
    .map((t) => `SELECT id FROM ${t} WHERE owner_id IN (${p1}, ${p2})`)
    .join(" UNION ALL ");
  return [
    `DELETE FROM subscriptions WHERE ${ends}`,
    `DELETE FROM auto_subscriptions WHERE ${either(["listener_id"])}`,
    `DELETE FROM deliveries ${hint("deliveries_claimable")} WHERE status = 'pending' AND claimed_by IS NULL AND ${ends}`,
    `DELETE FROM deliveries ${hint("deliveries_claimed")} WHERE claimed_by IS NOT NULL AND ${ends}`,
    `DELETE FROM deliveries WHERE status = 'failed' AND listener_id IN (${listeners}) AND ${ends}`,
  ];
}

/** A boolean column: SQLite's 0/1 or PostgreSQL's boolean. */
const flag = (value: unknown): boolean => value === true || value === 1;

export const toUser = (r: Row): User => ({
  id: r.id as string,
  username: r.username as string,
  email: r.email as string,
  plan: r.plan as User["plan"],
  isAdmin: flag(r.is_admin),
  createdAt: r.created_at as number,
  updatedAt: r.updated_at as number,
});

export const toOrg = (r: Row): Org => ({
  id: r.id as string,
  orgname: r.orgname as string,
  name: r.name as string,
  email: r.email as string,
  ownerId: r.owner_id as string,
  createdAt: r.created_at as number,
  updatedAt: r.updated_at as number,
});

/** A row's record with its `seq`, for the rows of a page (whose cursors are seqs). */
export const withSeq =
  <T>(map: (r: Row) => T) =>
  (r: Row): WithSeq<T> => ({ ...map(r), seq: r.seq as number });

export const toKey = (r: Row): ApiKey => ({
  id: r.id as string,
  userId: r.user_id as string,
  name: r.name as string,
  prefix: r.prefix as string,
  hash: r.hash as string,
  createdAt: r.created_at as number,
  revokedAt: (r.revoked_at as number | null) ?? null,
});

export const toSession = (r: Row): SessionRecord => ({
  id: r.id as string,
  userId: r.user_id as string,
  createdAt: r.created_at as number,
  expiresAt: r.expires_at as number,
  address: (r.address as string | null) ?? null,
  userAgent: (r.user_agent as string | null) ?? null,
});

/**
 * The columns of a session joined with its user, renamed so that the user's `id` and `created_at`
 * stay the user's (`toSessionWithUser` reads them back).
 */
export const sessionWithUserColumns =
  "s.id AS s_id, s.user_id, s.created_at AS s_created_at, s.expires_at, s.address, s.user_agent, u.*";

export const toSessionWithUser = (r: Row): { session: SessionRecord; user: User } => ({
  session: toSession({ ...r, id: r.s_id, created_at: r.s_created_at }),
  user: toUser(r),
});

export const toWebhook = (r: Row): WithSeq<Webhook> => ({
  seq: r.seq as number,
  id: r.id as string,
  ownerId: r.owner_id as string,
  createdBy: r.created_by as string,
  name: (r.name as string | null) ?? null,
  description: (r.description as string | null) ?? null,
  url: r.url as string,
  active: flag(r.active),
  signingSecretSealed: r.signing_secret_sealed as string,
  allowPrivate: flag(r.allow_private),
  createdAt: r.created_at as number,
  updatedAt: r.updated_at as number,
});

export const toAutoSubscription = (r: Row): AutoSubscription => ({
  id: r.id as string,
  ownerId: r.owner_id as string,
  listenerId: r.listener_id as string,
  eventName: r.event_name as string,
  createdAt: r.created_at as number,
});

export const toSubscription = (r: Row): Subscription => ({
  id: r.id as string,
  ownerId: r.owner_id as string,
  emitterId: r.emitter_id as string,
  listenerId: r.listener_id as string,
  eventName: r.event_name as string,
  createdAt: r.created_at as number,
});

export const toComponent = (r: Row): ComponentRecord => ({
  id: r.id as string,
  ownerId: r.owner_id as string,
  key: (r.key as string | null) ?? null,
  name: r.name as string,
  version: r.version as string,
  code: r.code as string,
  codeHash: r.code_hash as string,
  componentUrl: (r.component_url as string | null) ?? null,
  meta: JSON.parse(r.meta_json as string),
  dependencies: JSON.parse(r.dependencies_json as string),
  createdAt: r.created_at as number,
  updatedAt: r.updated_at as number,
});

export const toSource = (r: Row): WithSeq<SourceRecord> => ({
  seq: r.seq as number,
  id: r.id as string,
  ownerId: r.owner_id as string,
  createdBy: r.created_by as string,
  componentId: r.component_id as string,
  name: r.name as string,
  nameSlug: r.name_slug as string,
  active: flag(r.active),
  props: JSON.parse(r.props_json as string),
  endpointId: (r.endpoint_id as string | null) ?? null,
  retention: typeof r.retention_json === "string" ? JSON.parse(r.retention_json) : null,
  createdAt: r.created_at as number,
  updatedAt: r.updated_at as number,
});

/** An event's own columns after its window's: id, id_ms, id_seq, indexed_at_ms, event_json, meta_json. */
export const eventRowValues = (e: EventRecord): Array<string | number> => [
  e.id,
  e.idMs,
  e.idSeq,
  e.indexedAtMs,
  JSON.stringify(e.event ?? null),
  JSON.stringify(e.meta),
];

/** The `retention_json` column of a source patch: unchanged (undefined), the defaults (null), or a policy. */
export const retentionColumn = (retention: SourceRecord["retention"]): string | null | undefined =>
  retention === undefined ? undefined : retention ? JSON.stringify(retention) : null;

export const toTimer = (r: Row): TimerRecord => ({
  sourceId: r.source_id as string,
  propName: r.prop_name as string,
  intervalSeconds: (r.interval_seconds as number | null) ?? null,
  cron: (r.cron as string | null) ?? null,
  timezone: (r.timezone as string | null) ?? null,
  nextRunMs: r.next_run_ms as number,
});

export const toEvent = (r: Row): EventRecord => ({
  emitterId: r.emitter_id as string,
  channel: r.channel as string,
  id: r.id as string,
  idMs: r.id_ms as number,
  idSeq: r.id_seq as number,
  indexedAtMs: r.indexed_at_ms as number,
  event: JSON.parse(r.event_json as string),
  meta: JSON.parse(r.meta_json as string),
});

export const toAppAccount = (r: Row): WithSeq<AppAccount> => ({
  seq: r.seq as number,
  id: r.id as string,
  ownerId: r.owner_id as string,
  app: r.app as string,
  name: r.name as string,
  credentialsSealed: r.credentials_sealed as string,
  createdAt: r.created_at as number,
  updatedAt: r.updated_at as number,
});

export const toWorkflow = (r: Row): WithSeq<Workflow> => ({
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

export const toDelivery = (r: Row): WithSeq<Delivery> => {
  const d = plainDeliveryRow(r);
  // Only deliveries routed while traces were on have one (tracing.ts).
  if (r.trace_context !== null && r.trace_context !== undefined) d.trace = r.trace_context as string;
  return d;
};

const plainDeliveryRow = (r: Row): WithSeq<Delivery> => ({
  seq: r.seq as number,
  id: r.id as string,
  ownerId: r.owner_id as string,
  subscriptionId: r.subscription_id as string,
  emitterId: r.emitter_id as string,
  eventId: r.event_id as string,
  channel: r.channel as string,
  listenerId: r.listener_id as string,
  listenerKind: r.listener_kind as Delivery["listenerKind"],
  event: JSON.parse(r.event_json as string),
  meta: JSON.parse(r.meta_json as string),
  indexedAtMs: r.indexed_at_ms as number,
  hops: r.hops as number,
  status: r.status as DeliveryStatus,
  attempts: r.attempts as number,
  roundAttempts: r.round_attempts as number,
  nextAttemptMs: (r.next_attempt_ms as number | null) ?? null,
  lastStatusCode: (r.last_status_code as number | null) ?? null,
  lastError: (r.last_error as string | null) ?? null,
  lastDurationMs: (r.last_duration_ms as number | null) ?? null,
  claimedBy: (r.claimed_by as string | null) ?? null,
  createdMs: r.created_ms as number,
  updatedMs: r.updated_ms as number,
  // Only on replays, so that a routed delivery reads back as it was written.
  ...(typeof r.replay_id === "string"
    ? { replayId: r.replay_id, replayedFrom: (r.replayed_from as string | null) ?? null }
    : {}),
});

export const toAttempt = (r: Row): DeliveryAttempt => ({
  deliveryId: r.delivery_id as string,
  n: r.n as number,
  startedMs: r.started_ms as number,
  durationMs: r.duration_ms as number,
  statusCode: (r.status_code as number | null) ?? null,
  error: (r.error as string | null) ?? null,
  response: (r.response as string | null) ?? null,
  outcome: r.outcome as DeliveryAttempt["outcome"],
  ...withDetail(r),
});

/** An attempt's `detail`, when its row has one (attempts stored before migration 012 have none). */
function withDetail(r: Row): { detail?: DeliveryAttempt["detail"] } {
  const detail = toAttemptDetail(r);
  return detail ? { detail } : {};
}

/** Freezes `value` and everything in it, so a cached row handed to many callers cannot be changed by one. */
export function deepFreeze<T>(value: T): T {
  if (value && typeof value === "object" && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}

/**
 * The values of a new delivery's row, in the order both drivers' INSERTs bind them: id, owner_id,
 * subscription_id, emitter_id, event_id, channel, listener_id, listener_kind, event_json, meta_json,
 * indexed_at_ms, hops, status, attempts, round_attempts, next_attempt_ms (index 15), last_status_code,
 * last_error, last_duration_ms, claimed_by, created_ms, updated_ms, claimed_until, trace_context.
 */
export function deliveryRowValues(d: Delivery): Array<string | number | null> {
  return [
    d.id,
    d.ownerId,
    d.subscriptionId,
    d.emitterId,
    d.eventId,
    d.channel,
    d.listenerId,
    d.listenerKind,
    JSON.stringify(d.event ?? null),
    JSON.stringify(d.meta),
    d.indexedAtMs,
    d.hops,
    d.status,
    d.attempts,
    d.roundAttempts,
    d.nextAttemptMs,
    d.lastStatusCode,
    d.lastError,
    d.lastDurationMs,
    d.claimedBy,
    d.createdMs,
    d.updatedMs,
    d.claimedUntilMs ?? null,
    d.trace ?? null,
  ];
}

/**
 * The values of a delivery's settlement update, in the order both drivers' statements bind them:
 * status, attempts, round_attempts, next_attempt_ms, last_status_code, last_error, last_duration_ms,
 * updated_ms, then the delivery's ID.
 */
export function deliveryPatchParams(id: string, p: DeliveryPatch): Array<string | number | null> {
  return [
    p.status,
    p.attempts,
    p.roundAttempts,
    p.nextAttemptMs,
    p.lastStatusCode,
    p.lastError,
    p.lastDurationMs,
    p.updatedMs,
    id,
  ];
}
