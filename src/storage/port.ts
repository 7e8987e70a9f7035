/**
 * The storage port: operation-level methods that the domain and HTTP layers call. Drivers
 * (`sqlite/`, `postgres/`) implement it with plain SQL; differences are declared once in `capabilities`.
 * Everything is async so that a networked driver fits; transactions are explicit.
 */
import type {
  ApiKey,
  AppAccount,
  AutoSubscription,
  ComponentRecord,
  Delivery,
  DeliveryAttempt,
  DeliveryStatus,
  EventQuery,
  EventRecord,
  Org,
  OrgRole,
  Page,
  PageQuery,
  RetentionPolicy,
  SessionRecord,
  SourceRecord,
  Subscription,
  TimerRecord,
  Usage,
  User,
  Webhook,
  WithSeq,
  Workflow,
} from "../domain/types.ts";
import type { ClusterStore } from "./cluster-store.ts";
import type { DeliveryClaim, DeliveryPatch, DeliverySearch } from "./delivery-args.ts";
import type { EventSearch, EventSearchPage, EventSearchResult } from "./event-search.ts";
import type { StoreHealth } from "./health.ts";

export type { ClusterNode, ClusterStore } from "./cluster-store.ts";
export type { DeliveryClaim, DeliveryPatch, DeliverySearch } from "./delivery-args.ts";
export { defaultClaimLeaseMs } from "./delivery-args.ts";

export interface StorageCapabilities {
  /** Can wake other processes on change (PostgreSQL LISTEN/NOTIFY). */
  listenNotify: boolean;
  /** Several processes can claim work rows concurrently (PostgreSQL FOR UPDATE SKIP LOCKED). */
  skipLocked: boolean;
  /** Several nodes may serve it (PostgreSQL): what they count together (rate limits) is counted in it. */
  sharedByNodes: boolean;
}

/** An event ID's parts, as they are ordered. */
export interface EventIdKey {
  ms: number;
  seq: number;
}

/** One channel of one emitter: a window of events. */
export interface EventWindowKey {
  emitterId: string;
  channel: string;
}

/** Where a pending delivery stands in the claims' order: its due time, then its `seq`. */
export interface DueKey {
  ms: number;
  seq: number;
}

export interface SourcePatch {
  componentId?: string;
  name?: string;
  nameSlug?: string;
  /** `false` leaves the source's pending deliveries to `parkDeliveries`, `true` to `unparkDeliveries`. */
  active?: boolean;
  props?: Record<string, unknown>;
  endpointId?: string | null;
  retention?: RetentionPolicy | null;
  updatedAt: number;
}

export interface WebhookPatch {
  name?: string | null;
  description?: string | null;
  url?: string;
  /** `false` leaves the webhook's pending deliveries to `parkDeliveries`, `true` to `unparkDeliveries`. */
  active?: boolean;
  allowPrivate?: boolean;
  updatedAt: number;
}

/** The daily quota a reserved invocation must fit in (`reserveInvocation`). */
export interface UsageLimits {
  invocations: number;
  computeMs: number;
  storedBytes: number;
}

/** An API rate-limit key's window as `countRateLimitHit` left it. */
export interface RateLimitCount {
  /** Requests in the window, this one included. */
  count: number;
  windowStartMs: number;
}

/** The operations; inside `transaction` the same operations run on one connection, all or nothing. */
export interface StorageOps {
  // Users, organizations, keys
  countUsers(): Promise<number>;
  insertUser(user: User): Promise<void>;
  getUser(id: string): Promise<User | undefined>;
  getUserByUsername(username: string): Promise<User | undefined>;
  insertOrg(org: Org): Promise<void>;
  getOrg(id: string): Promise<Org | undefined>;
  getOrgByName(orgname: string): Promise<Org | undefined>;
  /** Adds or updates a membership. */
  putMember(orgId: string, userId: string, role: OrgRole, at: number): Promise<void>;
  /** Returns whether a membership was removed. */
  deleteMember(orgId: string, userId: string): Promise<boolean>;
  listOrgsOfUser(userId: string): Promise<Org[]>;
  /** Every user, newest first (the admin API's list). */
  listUsers(page: PageQuery): Promise<Page<WithSeq<User>>>;
  /** Every organization, newest first (the admin API's list). */
  listOrgs(page: PageQuery): Promise<Page<WithSeq<Org>>>;
  listMembers(orgId: string): Promise<Array<{ userId: string; role: OrgRole }>>;
  insertApiKey(key: ApiKey): Promise<void>;
  /** The key with that hash and its user, when the key is not revoked. */
  findApiKeyByHash(hash: string): Promise<{ key: ApiKey; user: User } | undefined>;
  listApiKeys(userId: string): Promise<ApiKey[]>;
  /** Marks a key revoked; returns whether it was live. */
  revokeApiKey(id: string, at: number): Promise<boolean>;

  // Console sessions (docs/console.md): rows of their user, deleted when they end
  insertSession(session: SessionRecord): Promise<void>;
  /** The session and its user, when the session exists and `expires_at` is after `now` (epoch seconds). */
  findSession(id: string, now: number): Promise<{ session: SessionRecord; user: User } | undefined>;
  /** A user's sessions that expire after `now`, newest first. */
  listSessions(userId: string, now: number): Promise<SessionRecord[]>;
  /** Deletes a session of this user; returns whether there was one. */
  deleteSession(userId: string, id: string): Promise<boolean>;
  /** Deletes a user's sessions but the newest `keep`; returns how many. */
  trimSessions(userId: string, keep: number): Promise<number>;
  /** Deletes every session whose `expires_at` is at or before `now`; returns how many. */
  pruneSessions(now: number): Promise<number>;

  // Webhooks
  insertWebhook(webhook: Webhook): Promise<void>;
  getWebhook(id: string): Promise<Webhook | undefined>;
  listWebhooks(ownerIds: string[], page: PageQuery): Promise<Page<WithSeq<Webhook>>>;
  updateWebhook(id: string, patch: WebhookPatch): Promise<Webhook | undefined>;
  deleteWebhook(id: string): Promise<boolean>;

  // Subscriptions
  /** Inserts unless the same (owner, emitter, listener, event name) exists; returns the stored one. */
  upsertSubscription(sub: Subscription): Promise<Subscription>;
  listSubscriptions(ownerIds: string[], page: PageQuery): Promise<Page<WithSeq<Subscription>>>;
  /**
   * Deletes the matching subscriptions and up to `deliveryDeleteBatch` of each one's pending deliveries;
   * a larger backlog is left marked, unclaimable, to `sweepDeletedSubscriptions` (docs/delivery.md).
   */
  deleteSubscriptions(
    ownerIds: string[],
    match: { emitterId: string; listenerId: string; eventName: string },
  ): Promise<Subscription[]>;
  /** Deletes the next batch of a deleted subscription's pending deliveries; false when none is left. */
  sweepDeletedSubscriptions(): Promise<boolean>;
  /** Removes every subscription naming this emitter or listener (the resource was deleted). */
  deleteSubscriptionsOf(resourceId: string): Promise<number>;
  /**
   * Removes the subscriptions, auto-subscriptions and undelivered deliveries one of two tenants owns that
   * name a resource of the other: what a member routed across an organization, on leaving it.
   */
  deleteRoutesBetween(a: string, b: string): Promise<number>;
  upsertAutoSubscription(rule: AutoSubscription): Promise<AutoSubscription>;
  listAutoSubscriptions(ownerIds: string[]): Promise<AutoSubscription[]>;

  /** The owner (`u_…`/`o_…`) of any stored resource by ID, whatever its kind; undefined when unknown. */
  resourceOwner(id: string): Promise<string | undefined>;

  // Usage
  getUsage(userId: string, day: string): Promise<Usage>;
  addUsage(userId: string, day: string, delta: Usage): Promise<void>;
  /**
   * Counts one invocation of the day for `userId` when the day's usage is below every limit; returns
   * whether it did. One statement, so that nodes checking at once cannot all pass on the same count.
   */
  reserveInvocation(userId: string, day: string, limits: UsageLimits): Promise<boolean>;

  // The store itself and work shared by nodes
  getMeta(key: string): Promise<string | undefined>;
  /** Stores `value` unless the key has one; returns the value stored now (this one or the earlier). */
  putMetaIfAbsent(key: string, value: string): Promise<string>;
  /** Some sealed secret of the store (a signing secret, credentials, a secret prop), if any. */
  anySealedSecret(): Promise<string | undefined>;
  /**
   * Inside a transaction: waits until no other transaction (of any node) holds the lock `name`, then
   * holds it until this transaction ends. SQLite runs one transaction at a time and needs nothing.
   */
  acquireTransactionLock(name: string): Promise<void>;
  /**
   * Counts a request of `key`: in the key's window when it began less than `windowMs` before `nowMs`,
   * otherwise in a new window starting now. One statement, so that every node counts into one window.
   */
  countRateLimitHit(key: string, nowMs: number, windowMs: number): Promise<RateLimitCount>;
  /** Forgets the windows that ended at or before `nowMs`, whatever their length; returns how many. */
  pruneRateLimits(nowMs: number): Promise<number>;

  // Components (owner `registry` holds published ones)
  insertComponent(component: ComponentRecord): Promise<void>;
  getComponent(id: string): Promise<ComponentRecord | undefined>;
  /** The newest component with this key among these owners. */
  findComponentByKey(ownerIds: string[], key: string): Promise<ComponentRecord | undefined>;
  /** The newest version of each key (each component without a key on its own) of these owners, newest first. */
  listLatestComponents(ownerIds: string[], page: PageQuery): Promise<Page<WithSeq<ComponentRecord>>>;
  /** Bytes the owner's components keep (code, definition, package versions), summed from an index. */
  componentBytes(ownerId: string): Promise<number>;
  /** The owner's newest component with this code and URL that is still the newest of its key. */
  findSameComponent(
    ownerId: string,
    codeHash: string,
    url: string | null,
  ): Promise<ComponentRecord | undefined>;
  /** Package versions of each component some source uses, once per distinct set. */
  listDeployedDependencies(): Promise<Array<Record<string, string>>>;

  // Sources
  insertSource(source: SourceRecord): Promise<void>;
  getSource(id: string): Promise<SourceRecord | undefined>;
  getSourceByEndpoint(endpointId: string): Promise<SourceRecord | undefined>;
  getSourceBySlug(ownerIds: string[], slug: string): Promise<SourceRecord | undefined>;
  /** Slugs of this owner that equal `base` or start with `base-`, for auto-increment. */
  listSlugs(ownerId: string, base: string): Promise<string[]>;
  listSources(ownerIds: string[], page: PageQuery): Promise<Page<WithSeq<SourceRecord>>>;
  /** Every active source ID (to restore timers and executors at start). */
  listActiveSourceIds(): Promise<string[]>;
  updateSource(id: string, patch: SourcePatch): Promise<SourceRecord | undefined>;
  /**
   * Removes the source and what it owns: db, dedupe state, timers, event clock. Its events stay for the
   * pruner, which keeps none of a deleted source and deletes them in paced batches (one statement for a
   * window of 1,000,000 held SQLite's one writer 1.5 s); every route to them reads the source first.
   */
  deleteSource(id: string): Promise<boolean>;

  getSourceDb(sourceId: string): Promise<{ data: Record<string, unknown>; version: number }>;
  putSourceDb(sourceId: string, data: Record<string, unknown>, version: number): Promise<void>;
  getDedupeState(sourceId: string): Promise<unknown>;
  putDedupeState(sourceId: string, state: unknown): Promise<void>;

  // Timers
  replaceTimers(sourceId: string, timers: TimerRecord[]): Promise<void>;
  listTimers(sourceId: string): Promise<TimerRecord[]>;
  /** Timers due at `nowMs`, soonest first. */
  dueTimers(nowMs: number, limit: number): Promise<TimerRecord[]>;
  /** Moves a timer from `expectedNextMs` to `nextMs`; false when another node claimed it first. */
  claimTimer(sourceId: string, propName: string, expectedNextMs: number, nextMs: number): Promise<boolean>;
  /** The soonest `next_run_ms` of any timer, for sleeping until then. */
  nextTimerMs(): Promise<number | undefined>;

  // Events
  /**
   * An emitter's last event ID. `lock`: in a transaction, the clock row stays locked until it ends, so
   * that another node storing events of the same emitter waits (drivers with several writers).
   */
  getEmitterClock(emitterId: string, lock?: boolean): Promise<EventIdKey | undefined>;
  putEmitterClock(emitterId: string, ms: number, seq: number): Promise<void>;
  /**
   * Stores an event; the pruner (`pruneEvents`) bounds its channel's window later. `reuseAt`, the
   * window's size when the caller knows it: once the channel holds that many, a driver may store the
   * event in the oldest one's place instead (SQLite rewrites that row; PostgreSQL appends).
   */
  insertEvent(event: EventRecord, reuseAt?: number): Promise<void>;
  /** How many events a channel holds now, pruned or not. */
  countEvents(emitterId: string, channel: string): Promise<number>;
  /**
   * The newest event of a channel past its newest `keep` (none when it holds no more): the pruner deletes
   * up to it. Later events are newer and others' deletes do not move it, so it never reaches a kept one.
   */
  eventWindowCut(emitterId: string, channel: string, keep: number): Promise<EventIdKey | undefined>;
  /**
   * Deletes up to `limit` of a channel's oldest events: older than `olderThanMs`, after `after` (the last
   * batch's `last`: what came before is gone, and on PostgreSQL a walk from the old end steps over it until
   * vacuum), none newer than `upTo` (a deleted range, a window's cut). Returns how many, and the newest.
   */
  pruneEvents(
    emitterId: string,
    channel: string,
    limit: number,
    bounds?: {
      olderThanMs?: number | undefined;
      after?: EventIdKey | undefined;
      upTo?: EventIdKey | undefined;
    },
  ): Promise<{ deleted: number; last?: EventIdKey }>;
  /** The first channel holding events after `after` in (emitter ID, channel) order, for the pruner's sweep. */
  nextEventWindow(after?: EventWindowKey): Promise<EventWindowKey | undefined>;
  /** The channels an emitter has stored events on. */
  listChannels(emitterId: string): Promise<string[]>;
  listEvents(emitterId: string, query: EventQuery): Promise<Page<EventRecord>>;
  /** Deletes an inclusive ID range (open ends when undefined) of one channel, or every channel; returns how many. */
  deleteEvents(
    emitterId: string,
    from: { ms: number; seq: number } | undefined,
    to: { ms: number; seq: number } | undefined,
    channel?: string,
  ): Promise<number>;

  /** Stored events matching a search (event-search.ts), newest first. */
  searchEvents(search: EventSearch, page: EventSearchPage): Promise<EventSearchResult>;
  /** The store's plan for a search's page, as text: tests and the bench show which index serves it. */
  explainEventSearch(search: EventSearch, page: EventSearchPage): Promise<string>;
  /**
   * Present where a commit leaves events out of the search's indexes (PostgreSQL, migration 016): puts up to
   * `limit` of those stored before `storedBeforeMs` (their `indexedAtMs`) in, and returns how many. The
   * search finds them either way; the search indexer (domain/events/search-indexer.ts) calls it.
   */
  indexEventsForSearch?(storedBeforeMs: number, limit: number): Promise<number>;

  // App accounts
  insertAppAccount(account: AppAccount): Promise<void>;
  getAppAccount(id: string): Promise<AppAccount | undefined>;
  listAppAccounts(ownerIds: string[], page: PageQuery): Promise<Page<WithSeq<AppAccount>>>;
  deleteAppAccount(id: string): Promise<boolean>;

  // External workflows
  insertWorkflow(workflow: Workflow): Promise<void>;
  getWorkflow(id: string): Promise<Workflow | undefined>;
  listWorkflows(ownerIds: string[], page: PageQuery): Promise<Page<WithSeq<Workflow>>>;
  deleteWorkflow(id: string): Promise<boolean>;

  // Deliveries (the outbox)
  /**
   * Subscriptions that route this emitter's channel: those naming it exactly, and the `dc_*`/`p_*`
   * globs of its kind held by its owner (`ownerId`; none when undefined). `countListeners`: how many route
   * any of its channels; for a glob, the most that route one emitter of its kind of the owner, counting the
   * next emitter's auto-subscriptions (the cap on listeners per emitter: docs/delivery.md).
   */
  matchSubscriptions(emitter: string, ownerId: string | undefined, channel: string): Promise<Subscription[]>;
  countListeners(emitter: string, ownerId: string): Promise<number>;
  insertDeliveries(deliveries: Delivery[]): Promise<void>;
  getDelivery(id: string): Promise<Delivery | undefined>;
  /**
   * Takes pending deliveries due at `nowMs`, soonest first, and marks them with the claim token and
   * lease. Other claimers' live claims count against `perListener`. Skipped: ones claimed under a live
   * lease, those of inactive webhooks and sources (they wait), those of `exceptListeners`, and a source
   * listener's delivery while an older one of its subscription is still pending (in order, one at a time).
   */
  claimDeliveries(claim: DeliveryClaim): Promise<Delivery[]>;
  /**
   * Gives back the claims `claimToken` holds among `ids` (one another node took since stays its); an
   * inactive listener's are parked on the way (`parkDeliveries`).
   */
  releaseDeliveries(ids: string[], claimToken: string): Promise<void>;
  /** Releases the claims marked with `claimToken` (a crashed run of this node left them); returns how many. */
  resetDeliveryClaims(claimToken: string): Promise<number>;
  /** Extends to `untilMs` the lease of the deliveries among `ids` that `claimToken` holds; returns how many. */
  renewDeliveryClaims(claimToken: string, untilMs: number, ids: string[]): Promise<number>;
  /** Stores an attempt's result and releases the claim; false when the delivery no longer exists. */
  updateDelivery(id: string, patch: DeliveryPatch): Promise<boolean>;
  insertDeliveryAttempt(attempt: DeliveryAttempt): Promise<void>;
  /**
   * `updateDelivery` and `insertDeliveryAttempt` when nobody needs to know whether the delivery still
   * exists (a deleted one is left deleted, its attempt not stored): inside a transaction the driver may
   * hold both writes back, as it does emits, instead of waiting for the update's answer.
   */
  settleDelivery(id: string, patch: DeliveryPatch, attempt: DeliveryAttempt | undefined): Promise<void>;
  /** A listener's deliveries, newest first, optionally of one status. */
  listDeliveries(
    listenerId: string,
    page: PageQuery,
    status?: DeliveryStatus,
  ): Promise<Page<WithSeq<Delivery>>>;
  /** The attempts of these deliveries, oldest first. */
  listDeliveryAttempts(deliveryIds: string[], responseChars?: number): Promise<DeliveryAttempt[]>;
  /** Deletes these deliveries of a listener while pending and not claimed (a cancelled scheduled event); returns how many. */
  cancelDeliveries(listenerId: string, ids: string[]): Promise<number>;
  /** Makes a delivery pending and due at `nowMs` with a fresh retry schedule; false when it is claimed or unknown. */
  requeueDelivery(id: string, nowMs: number): Promise<boolean>;
  /**
   * Requeues up to `limit` of a listener's failed deliveries created at or after `sinceMs`, oldest first,
   * past `afterSeq` (the `lastSeq` of the batch before) and last updated at or before `nowMs` (so that
   * one requeued by an earlier batch of the same redeliver, which failed again since, is left); returns
   * how many, and the last one's `seq`. Callers go in small batches, each a short statement.
   */
  requeueFailedDeliveries(
    listenerId: string,
    sinceMs: number,
    nowMs: number,
    page: { afterSeq?: number | undefined; limit: number },
  ): Promise<{ requeued: number; lastSeq?: number | undefined }>;
  /**
   * Parks up to `limit` of an inactive listener's unclaimed due deliveries (no due time: claims never see
   * them), soonest due first past `after`; returns how many and the last. Nothing unless it is inactive.
   * Callers go in small batches; a claimed one is parked when released or retried.
   */
  parkDeliveries(
    listenerId: string,
    limit: number,
    after?: DueKey,
  ): Promise<{ parked: number; last?: DueKey }>;
  /**
   * Listeners with parked deliveries (pending with no due time) that are not inactive: made active
   * again, or deleted. Each of their parked deliveries is to be made due (`unparkDeliveries`).
   */
  listUnparkableListeners(): Promise<string[]>;
  /**
   * Makes up to `limit` of a listener's parked deliveries due at `nowMs`, oldest first, unless the
   * listener is inactive; returns how many. Callers go in small batches, each a short statement.
   */
  unparkDeliveries(listenerId: string, nowMs: number, limit: number): Promise<number>;
  /** The soonest `next_attempt_ms` of an unclaimed pending delivery. */
  nextDeliveryMs(): Promise<number | undefined>;
  /** Pending deliveries (the backlog), and how many of them are due at `nowMs`. */
  countPendingDeliveries(nowMs: number): Promise<{ pending: number; due: number }>;
  /**
   * Deletes up to `limit` finished deliveries (and their attempts) last updated before `beforeMs`, the
   * oldest first; returns how many. The dispatcher calls it in small batches, each a short statement.
   */
  pruneDeliveries(beforeMs: number, limit: number): Promise<number>;

  // Delivery history (docs/delivery.md, "Attempts" and "Replay"): storage/*/delivery-history.ts
  /** Deliveries matching `search`, newest first. */
  searchDeliveries(search: DeliverySearch, page: PageQuery): Promise<Page<WithSeq<Delivery>>>;
  /** One stored event of an emitter by its ID, whatever its channel. */
  getEvent(emitterId: string, eventId: string): Promise<EventRecord | undefined>;
  /**
   * Marks the deliveries `insertDeliveries` just wrote under the subscription ID `replayId` as that
   * replay's, each with the newest earlier delivery of its event to its listener; returns how many.
   * Those an earlier call marked are left, so that a replay written in several transactions marks each
   * of its deliveries once.
   */
  markReplay(replayId: string): Promise<number>;
  /**
   * Inside a transaction: makes it fail (code `lease_lost`) unless `nodeId` still holds the source's
   * run lease at `gen`, so a node that lost a lease never commits a run over another node's. A no-op
   * in a driver without `cluster` (one node).
   */
  assertSourceLease(sourceId: string, nodeId: string, gen: number): Promise<void>;
}

export interface Storage extends StorageOps {
  readonly driver: "sqlite" | "postgres";
  readonly capabilities: StorageCapabilities;
  /** Present with `listenNotify`: what lets several nodes share the store. */
  readonly cluster?: ClusterStore;
  /** Whether the store answers now (a networked store can be lost while running; see health.ts). */
  readonly health: StoreHealth;
  /** Runs `fn` in one transaction: committed when it resolves, rolled back when it throws. */
  transaction<T>(fn: (tx: StorageOps) => Promise<T>): Promise<T>;
  /** Cheap round trip for readiness checks. */
  ping(): Promise<void>;
  /** Waits for open work and closes connections; idempotent. */
  close(): Promise<void>;
}
