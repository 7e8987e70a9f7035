/**
 * The storage port: operation-level methods that the domain and HTTP layers call. Drivers
 * (`sqlite/`, `postgres/`) implement it with plain SQL; differences are declared once in `capabilities`.
 * Everything is async so that a networked driver fits; transactions are explicit.
 */
import type {
  ApiKey,
  AutoSubscription,
  Org,
  OrgRole,
  Page,
  PageQuery,
  Subscription,
  Usage,
  User,
  Webhook,
  WithSeq,
} from "../domain/types.ts";

export interface StorageCapabilities {
  /** Can wake other processes on change (PostgreSQL LISTEN/NOTIFY). */
  listenNotify: boolean;
  /** Several processes can claim work rows concurrently (PostgreSQL FOR UPDATE SKIP LOCKED). */
  skipLocked: boolean;
}

export interface WebhookPatch {
  name?: string | null;
  description?: string | null;
  url?: string;
  active?: boolean;
  updatedAt: number;
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
  listMembers(orgId: string): Promise<Array<{ userId: string; role: OrgRole }>>;
  insertApiKey(key: ApiKey): Promise<void>;
  /** The key with that hash and its user, when the key is not revoked. */
  findApiKeyByHash(hash: string): Promise<{ key: ApiKey; user: User } | undefined>;
  listApiKeys(userId: string): Promise<ApiKey[]>;
  /** Marks a key revoked; returns whether it was live. */
  revokeApiKey(id: string, at: number): Promise<boolean>;

  // Webhooks
  insertWebhook(webhook: Webhook): Promise<void>;
  getWebhook(id: string): Promise<Webhook | undefined>;
  listWebhooks(ownerIds: string[], page: PageQuery): Promise<Page<WithSeq<Webhook>>>;
  updateWebhook(id: string, patch: WebhookPatch): Promise<Webhook | undefined>;
  deleteWebhook(id: string): Promise<boolean>;

  // Subscriptions
  /** Inserts unless the same (owner, emitter, listener, event name) exists; returns the stored one. */
  upsertSubscription(sub: Subscription): Promise<Subscription>;
  listSubscriptions(ownerIds: string[]): Promise<Subscription[]>;
  deleteSubscriptions(
    ownerIds: string[],
    match: { emitterId: string; listenerId: string; eventName: string },
  ): Promise<Subscription[]>;
  /** Removes every subscription naming this emitter or listener (the resource was deleted). */
  deleteSubscriptionsOf(resourceId: string): Promise<number>;
  upsertAutoSubscription(rule: AutoSubscription): Promise<AutoSubscription>;
  listAutoSubscriptions(ownerIds: string[]): Promise<AutoSubscription[]>;

  /** The owner (`u_…`/`o_…`) of any stored resource by ID, whatever its kind; undefined when unknown. */
  resourceOwner(id: string): Promise<string | undefined>;

  // Usage
  getUsage(userId: string, day: string): Promise<Usage>;
  addUsage(userId: string, day: string, delta: Usage): Promise<void>;
}

export interface Storage extends StorageOps {
  readonly driver: "sqlite" | "postgres";
  readonly capabilities: StorageCapabilities;
  /** Runs `fn` in one transaction: committed when it resolves, rolled back when it throws. */
  transaction<T>(fn: (tx: StorageOps) => Promise<T>): Promise<T>;
  /** Cheap round trip for readiness checks. */
  ping(): Promise<void>;
  /** Waits for open work and closes connections; idempotent. */
  close(): Promise<void>;
}
