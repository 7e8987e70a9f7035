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

/** Who is calling: the key's user and the organizations they belong to. */
export interface Principal {
  user: User;
  keyId: string;
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
