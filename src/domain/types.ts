/** Domain records as the store keeps them. Timestamps are epoch seconds unless named `…Ms`. */

export type Plan = "free" | "paid";

/** A person (or robot) with API keys; admins may manage other accounts. */
export interface User {
  id: string;
  username: string;
  email: string;
  plan: Plan;
  isAdmin: boolean;
  createdAt: number;
  updatedAt: number;
}

/** An organization: owns resources that all its members may use. */
export interface Org {
  id: string;
  orgname: string;
  name: string;
  email: string;
  ownerId: string;
  createdAt: number;
  updatedAt: number;
}

export type OrgRole = "owner" | "member";

/** An API key's stored form: only a hash of the secret is kept. */
export interface ApiKey {
  id: string;
  userId: string;
  name: string;
  /** First characters of the key, to tell keys apart in listings. */
  prefix: string;
  hash: string;
  createdAt: number;
  revokedAt: number | null;
}

/**
 * A console sign-in of a user (docs/console.md): its sealed cookie names it, and it lasts until it
 * expires or is ended (sign-out, revoked by its user or an admin, or the oldest past the cap).
 */
export interface SessionRecord {
  id: string;
  userId: string;
  createdAt: number;
  expiresAt: number;
  /** The client address and User-Agent at sign-in, to tell sessions apart in a list. */
  address: string | null;
  userAgent: string | null;
}

/** Who is calling: the user of the key or session, and the organizations they belong to. */
export interface Principal {
  user: User;
  /** What the request authenticated with: an API key (`key_…`) or a console session (`ses_…`). */
  credential: { kind: "key" | "session"; id: string };
  orgIds: string[];
}

/** An account-level HTTP destination for subscriptions. */
export interface Webhook {
  id: string;
  /** `u_…` or `o_…`: who owns it. */
  ownerId: string;
  createdBy: string;
  name: string | null;
  description: string | null;
  url: string;
  active: boolean;
  /** The `whsec_…` signing secret, sealed by the server's SecretBox (never stored in clear). */
  signingSecretSealed: string;
  /**
   * Set by an admin (the operator): deliveries may reach loopback and private addresses, which the
   * delivery guard refuses otherwise (a local receiver such as `fount listen`'s).
   */
  allowPrivate: boolean;
  createdAt: number;
  updatedAt: number;
}

/** A route from an emitter (or glob) to a listener for one channel (`""` = default). */
export interface Subscription {
  id: string;
  ownerId: string;
  emitterId: string;
  listenerId: string;
  eventName: string;
  createdAt: number;
}

/** A rule that subscribes a listener to every emitter created after it. */
export interface AutoSubscription {
  id: string;
  ownerId: string;
  listenerId: string;
  eventName: string;
  createdAt: number;
}

/** Daily usage counters of a user (UTC day `YYYY-MM-DD`). */
export interface Usage {
  invocations: number;
  computeMs: number;
  /** JSON of the events stored and of their delivery copies (stored-bytes.ts measures it). */
  storedBytes: number;
}

/** One page of a newest-first list; `seq` values bound the page for cursors. */
export interface Page<T> {
  items: T[];
  totalCount: number;
}

/** Cursor bounds are store sequence numbers: `afterSeq` walks toward older items, `beforeSeq` toward newer. */
export interface PageQuery {
  limit: number;
  afterSeq?: number;
  beforeSeq?: number;
}

/** A listed item with its sequence number, for cursor building. */
export type WithSeq<T> = T & { seq: number };

/** A saved component (`sc_…`): the code as sent, what the sandbox reported about it, pinned packages. */
export interface ComponentRecord {
  id: string;
  /** `u_…`/`o_…`, or `registry` for published components. */
  ownerId: string;
  key: string | null;
  name: string;
  version: string;
  code: string;
  codeHash: string;
  componentUrl: string | null;
  meta: import("../runtime/types.ts").ComponentMeta;
  dependencies: Record<string, string>;
  createdAt: number;
  updatedAt: number;
}

/** A deployed component (`dc_…`). `props` holds configured values as stored (secrets sealed). */
export interface SourceRecord {
  id: string;
  ownerId: string;
  createdBy: string;
  componentId: string;
  name: string;
  nameSlug: string;
  active: boolean;
  props: Record<string, unknown>;
  /** Random ID of its HTTP endpoint (`/e/{endpointId}`), when it has an HTTP interface prop. */
  endpointId: string | null;
  /** How long its events are kept; absent or null: the instance's defaults (domain/events/retention.ts). */
  retention?: RetentionPolicy | null;
  createdAt: number;
  updatedAt: number;
}

/**
 * A source's retention policy (`retention` in the API): the newest `events` of each channel, none older
 * than `days`; a field left out takes the instance's default for it.
 */
export interface RetentionPolicy {
  events?: number;
  days?: number;
}

/** What a channel's window shows and keeps: its newest `keep` events, none whose ID is older than `sinceMs`. */
export interface EventWindow {
  keep: number;
  sinceMs?: number;
}

/** A timer interface of a source and when it fires next. */
export interface TimerRecord {
  sourceId: string;
  propName: string;
  intervalSeconds: number | null;
  cron: string | null;
  timezone: string | null;
  nextRunMs: number;
}

/** `metadata` of an event entry: the emit's own meta is kept beside the routing fields. */
export interface EventMeta {
  emit_id: string;
  name: string;
  emitter_id: string;
  id?: string | number;
  summary?: string;
  ts?: number;
  /** Epoch ms: the event is delivered to its listeners from then on, not before. */
  delivery_ts?: number;
}

/** A stored event (emit, log or error) of a source or workflow. */
export interface EventRecord {
  emitterId: string;
  channel: string;
  /** `<idMs>-<idSeq>`. */
  id: string;
  idMs: number;
  idSeq: number;
  indexedAtMs: number;
  event: unknown;
  meta: EventMeta;
}

/** Query over one emitter's events, newest first; cursors are event IDs. */
export interface EventQuery {
  channel: string;
  limit: number;
  /** Older than this ID. */
  after?: { ms: number; seq: number };
  /** Newer than this ID. */
  before?: { ms: number; seq: number };
  /**
   * The channel's window: events beyond it, stored until the pruner deletes them, are not listed nor
   * counted. Without it, every stored event is.
   */
  window?: EventWindow;
  /**
   * Bytes of event JSON the page may hold: it ends before the event that would take it past them (the
   * first event always comes), so a page of large events stays small; the store reads sizes first.
   */
  maxBytes?: number;
}

/** A connected app account (`apn_…`) whose credentials become an app prop's `$auth`. */
export interface AppAccount {
  id: string;
  ownerId: string;
  app: string;
  name: string;
  credentialsSealed: string;
  createdAt: number;
  updatedAt: number;
}

/** An external workflow (`p_…`): an emitter and listener whose runner lives outside Fount. */
export interface Workflow {
  id: string;
  ownerId: string;
  createdBy: string;
  name: string;
  /** Where routed events are POSTed; null: events routed to it are recorded, never sent. */
  url: string | null;
  /** The `whsec_…` secret deliveries are signed with, sealed by the SecretBox. */
  signingSecretSealed: string;
  createdAt: number;
  updatedAt: number;
}

/** Who receives a delivery, by listener ID prefix: `wh_` webhook, `dc_` source, `p_` workflow. */
export type ListenerKind = "webhook" | "source" | "workflow";

/** Every state a delivery can be in: the API's `status` filters and the store's searches check against it. */
export const deliveryStatuses = ["pending", "succeeded", "failed"] as const;
export type DeliveryStatus = (typeof deliveryStatuses)[number];

/**
 * One routed event on its way to one listener (the outbox row). It carries its own copy of the event,
 * since the emitter's stream keeps only its last 100 events. Times are epoch ms.
 */
export interface Delivery {
  id: string;
  /** The subscription's owner. */
  ownerId: string;
  subscriptionId: string;
  emitterId: string;
  eventId: string;
  channel: string;
  listenerId: string;
  listenerKind: ListenerKind;
  /** The event's data and metadata as stored when it was routed. */
  event: unknown;
  meta: EventMeta;
  indexedAtMs: number;
  /** Source-to-source hops before this delivery (1 for an event from an endpoint, timer or API call). */
  hops: number;
  status: DeliveryStatus;
  /** Attempts made in all. */
  attempts: number;
  /** Attempts since the last (re)delivery request: what the retry schedule counts. */
  roundAttempts: number;
  /** When the next attempt is due; null once finished. */
  nextAttemptMs: number | null;
  lastStatusCode: number | null;
  lastError: string | null;
  lastDurationMs: number | null;
  /** The dispatcher run that is attempting it now; null when nobody is. */
  claimedBy: string | null;
  /**
   * Set only on a new delivery that its node claims as it routes it (the dispatcher's
   * `claimAtRouting`): the claim's lease, written with the row.
   */
  claimedUntilMs?: number;
  createdMs: number;
  updatedMs: number;
  /**
   * With traces on: the span its event was stored under (tracing.ts, `contextText`), the parent of each
   * attempt's span, so that every attempt, however late and on whichever node, continues the event's trace.
   */
  trace?: string;
  /** Set on a replay (`POST …/replay`): the replay request's ID (`rpl_…`); absent or null otherwise. */
  replayId?: string | null;
  /** A replay's newest earlier delivery of the same event to the same listener, when one was kept. */
  replayedFrom?: string | null;
}

/** One attempt of a delivery, kept for `GET /v1/webhooks/{id}/deliveries`. */
export interface DeliveryAttempt {
  deliveryId: string;
  /** 1 for the first attempt. */
  n: number;
  startedMs: number;
  durationMs: number;
  statusCode: number | null;
  error: string | null;
  /** The first bytes of the response body (`attemptResponseBytes`), for diagnosis. */
  response: string | null;
  /** What the attempt led to. */
  outcome: "succeeded" | "retry" | "failed";
  /** What was sent and received besides (delivery/attempt-record.ts); absent for attempts stored before it was kept. */
  detail?: AttemptDetail;
}

/**
 * What an HTTP attempt sent and got besides its status and body: the request's URL and headers (the
 * signature, never the secret), the answer's headers, whether its body was cut, and the kind of error.
 */
export interface AttemptDetail {
  url: string | null;
  /**
   * The request's headers that change between attempts (`webhook-timestamp`, `webhook-signature`, a
   * trace's); the others follow from the delivery (delivery/http-sender.ts `webhookHeaders`), and are not
   * stored again.
   */
  requestHeaders: Record<string, string> | null;
  responseHeaders: Record<string, string | string[]> | null;
  /** The answer's body was longer than what was kept. */
  responseTruncated: boolean;
  /** What kind of failure ended the attempt; null when it succeeded. */
  errorKind: AttemptErrorKind | null;
}

/**
 * What kind of failure ended an attempt: the name did not resolve (`dns`), the TLS handshake failed,
 * no answer in time, the connection was refused or reset, another `network` error, the address guard
 * refused the destination (`guard`), an answer that was not 2xx (`http`), a URL that does not parse,
 * the listener source's run failed (`run`), or Fount could not prepare the attempt (`internal`).
 */
export type AttemptErrorKind =
  | "dns"
  | "tls"
  | "timeout"
  | "refused"
  | "reset"
  | "network"
  | "guard"
  | "http"
  | "url"
  | "run"
  | "internal";
