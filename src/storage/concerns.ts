/**
 * The storage port's operations by concern: each type is the slice of `StorageOps` that one file
 * implements, and that file has the same name in both drivers (`sqlite/sources.ts` and
 * `postgres/sources.ts` both return `SourceOps`), so an operation is found in the same place in either,
 * and the compiler keeps the two folders matched operation by operation.
 */
import type { StorageOps } from "./port.ts";

/** accounts.ts: users, organizations, memberships, API keys and daily usage counters. */
export type AccountOps = Pick<
  StorageOps,
  | "countUsers"
  | "insertUser"
  | "getUser"
  | "getUserByUsername"
  | "insertOrg"
  | "getOrg"
  | "getOrgByName"
  | "putMember"
  | "deleteMember"
  | "listOrgsOfUser"
  | "listUsers"
  | "listOrgs"
  | "listMembers"
  | "insertApiKey"
  | "findApiKeyByHash"
  | "listApiKeys"
  | "revokeApiKey"
  | "getUsage"
  | "addUsage"
  | "reserveInvocation"
>;

/** sessions.ts: console sessions. */
export type SessionOps = Pick<
  StorageOps,
  "insertSession" | "findSession" | "listSessions" | "deleteSession" | "trimSessions" | "pruneSessions"
>;

/** webhooks.ts: webhooks. */
export type WebhookOps = Pick<
  StorageOps,
  "insertWebhook" | "getWebhook" | "listWebhooks" | "updateWebhook" | "deleteWebhook"
>;

/** subscriptions.ts: subscriptions, auto-subscriptions, routing matches, owners of resources by ID. */
export type SubscriptionOps = Pick<
  StorageOps,
  | "upsertSubscription"
  | "listSubscriptions"
  | "deleteSubscriptions"
  | "sweepDeletedSubscriptions"
  | "deleteSubscriptionsOf"
  | "deleteRoutesBetween"
  | "upsertAutoSubscription"
  | "listAutoSubscriptions"
  | "resourceOwner"
  | "matchSubscriptions"
  | "countListeners"
>;

/** sources.ts: components, sources, each source's db and dedupe state, its run lease check. */
export type SourceOps = Pick<
  StorageOps,
  | "insertComponent"
  | "getComponent"
  | "findComponentByKey"
  | "listLatestComponents"
  | "componentBytes"
  | "findSameComponent"
  | "listDeployedDependencies"
  | "insertSource"
  | "getSource"
  | "getSourceByEndpoint"
  | "getSourceBySlug"
  | "listSlugs"
  | "listSources"
  | "listActiveSourceIds"
  | "updateSource"
  | "deleteSource"
  | "getSourceDb"
  | "putSourceDb"
  | "getDedupeState"
  | "putDedupeState"
  | "assertSourceLease"
>;

/** timers.ts: timers of sources. */
export type TimerOps = Pick<
  StorageOps,
  "replaceTimers" | "listTimers" | "dueTimers" | "claimTimer" | "nextTimerMs"
>;

/** events.ts: event windows and each emitter's ID clock. */
export type EventOps = Pick<
  StorageOps,
  | "getEmitterClock"
  | "putEmitterClock"
  | "insertEvent"
  | "countEvents"
  | "eventWindowCut"
  | "pruneEvents"
  | "nextEventWindow"
  | "listChannels"
  | "listEvents"
  | "deleteEvents"
>;

/** event-search.ts: stored events found by text, JSON path, time and delivery outcome. */
export type EventSearchOps = Pick<StorageOps, "searchEvents" | "explainEventSearch" | "indexEventsForSearch">;

/** app-accounts.ts: connected app accounts. */
export type AppAccountOps = Pick<
  StorageOps,
  "insertAppAccount" | "getAppAccount" | "listAppAccounts" | "deleteAppAccount"
>;

/** workflows.ts: external workflows. */
export type WorkflowOps = Pick<
  StorageOps,
  "insertWorkflow" | "getWorkflow" | "listWorkflows" | "deleteWorkflow"
>;

/** deliveries.ts: the deliveries outbox and its attempts. */
export type DeliveryOps = Pick<
  StorageOps,
  | "insertDeliveries"
  | "getDelivery"
  | "claimDeliveries"
  | "releaseDeliveries"
  | "resetDeliveryClaims"
  | "renewDeliveryClaims"
  | "updateDelivery"
  | "insertDeliveryAttempt"
  | "settleDelivery"
  | "listDeliveries"
  | "listDeliveryAttempts"
  | "cancelDeliveries"
  | "requeueDelivery"
  | "requeueFailedDeliveries"
  | "parkDeliveries"
  | "listUnparkableListeners"
  | "unparkDeliveries"
  | "nextDeliveryMs"
  | "countPendingDeliveries"
  | "pruneDeliveries"
>;

/** delivery-history.ts: deliveries searched by listener or event, one event by ID, replay marks. */
export type DeliveryHistoryOps = Pick<StorageOps, "searchDeliveries" | "getEvent" | "markReplay">;

/** node-ops.ts: what nodes share (meta, a sealed secret, transaction locks, rate-limit windows). */
export type NodeOps = Pick<
  StorageOps,
  | "getMeta"
  | "putMetaIfAbsent"
  | "anySealedSecret"
  | "acquireTransactionLock"
  | "countRateLimitHit"
  | "pruneRateLimits"
>;
