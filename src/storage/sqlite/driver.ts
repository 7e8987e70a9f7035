/**
 * The embedded store: SQLite through node:sqlite, one connection, WAL. Every operation runs under an
 * async lock so that an open transaction never sees statements of another caller interleaved.
 */

import { chmodSync, mkdirSync } from "node:fs";
import path from "node:path";
import { DatabaseSync, type SQLInputValue } from "node:sqlite";
import { BoundedCache } from "../../bounded-cache.ts";
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
  SessionRecord,
  SourceRecord,
  Subscription,
  TimerRecord,
  Usage,
  User,
  Webhook,
  WithSeq,
  Workflow,
} from "../../domain/types.ts";
import { alwaysAvailable } from "../health.ts";
import { AsyncLock } from "../lock.ts";
import type {
  DeliveryClaim,
  DeliveryPatch,
  RateLimitCount,
  SourcePatch,
  Storage,
  StorageOps,
  UsageLimits,
  WebhookPatch,
} from "../port.ts";
import {
  deepFreeze,
  toAppAccount,
  toAutoSubscription,
  toComponent,
  toEvent,
  toKey,
  toOrg,
  toSource,
  toSubscription,
  toTimer,
  toUser,
  toWebhook,
  withSeq,
} from "../rows.ts";
import { SqliteDeliveryOps } from "./delivery-ops.ts";
import { migrate } from "./migrate.ts";
import { SqliteNodeOps } from "./node-ops.ts";
import { limitParam, type Row } from "./rows.ts";
import { SqliteSessionOps } from "./sessions.ts";

/** `?, ?, ?` for an IN list (never empty: an empty list matches nothing). */
function placeholders(values: readonly unknown[]): string {
  return values.length === 0 ? "NULL" : values.map(() => "?").join(", ");
}

/** Rows cached per connection; a cache that grew past this starts over (endpoint probes cannot grow it). */
const maxCachedRows = 10_000;

/** Tables that hold ID-addressed resources with an owner, by ID prefix. Later migrations add kinds here. */
const ownedTables: Record<string, string> = {
  wh: "webhooks",
  sub: "subscriptions",
  sc: "components",
  dc: "sources",
  apn: "app_accounts",
  p: "workflows",
  del: "deliveries",
};

/** Writes held back to the end of a transaction (see `SqliteOps.#deferred`), one per row. */
interface Deferred {
  clocks: Map<string, { ms: number; seq: number }>;
  usage: Map<string, Usage & { userId: string; day: string }>;
}

/** The operations on one connection, without locking (the caller holds the lock). */
export class SqliteOps implements StorageOps {
  readonly db: DatabaseSync;
  readonly #statements = new Map<string, ReturnType<DatabaseSync["prepare"]>>();
  readonly #delivery: SqliteDeliveryOps;
  readonly #node: SqliteNodeOps;
  readonly #sessions: SqliteSessionOps;
  /**
   * Rows read on every source endpoint hit, kept frozen. While the server runs, this connection is the
   * only writer of `sources` (users are never updated or deleted): a write to `sources`, or a rolled-back
   * transaction that may have read its own uncommitted rows, clears the source cache.
   */
  readonly #sourcesByEndpoint = new BoundedCache<string, SourceRecord>(maxCachedRows);
  /** The same rows by ID, read for every timer tick and source-to-source delivery; cleared with the above. */
  readonly #sourcesById = new BoundedCache<string, SourceRecord>(maxCachedRows);
  readonly #users = new BoundedCache<string, User>(maxCachedRows);
  /** Webhooks, read for every delivery attempt; each write to one here forgets it. */
  readonly #webhooks = new BoundedCache<string, Webhook>(maxCachedRows);
  /**
   * What routing reads for every stored event: the owner of each emitter (sources and workflows, whose
   * owner never changes; deleting one forgets it) and the subscriptions matching an emitter, its owner
   * and a channel (any write to `subscriptions` forgets them all).
   */
  readonly #emitterOwners = new BoundedCache<string, string>(maxCachedRows);
  readonly #matches = new BoundedCache<string, Subscription[]>(maxCachedRows);
  /**
   * The slots of each `emitter\0channel` window (migration 004), read once and then kept up to date by
   * this connection's inserts, so that storing an event never reads the window. This connection is the
   * only writer of `events` (`fount admin` on the same file writes accounts only). Deletes of ranges and
   * sources, and rollbacks, forget them.
   */
  readonly #windows = new BoundedCache<string, number[]>(maxCachedRows);
  /**
   * Inside a transaction, the writes every stored event or invocation makes to the same few rows (the
   * emitter's clock, the owner's usage of the day) are held here and made once per row
   * just before COMMIT, so a group commit of many emits writes each of those rows once. Any read or
   * delete of those tables makes them first, so nothing inside the transaction sees the difference.
   */
  #deferred: Deferred | undefined;

  constructor(db: DatabaseSync) {
    this.db = db;
    const helpers = {
      get: <T>(text: string, params: SQLInputValue[], map: (r: Row) => T) => this.get(text, params, map),
      all: <T>(text: string, params: SQLInputValue[], map: (r: Row) => T) => this.all(text, params, map),
      run: (text: string, params: SQLInputValue[]) => this.run(text, params),
      page: <T>(table: string, where: string, params: SQLInputValue[], q: PageQuery, map: (r: Row) => T) =>
        this.page(table, where, params, q, map),
    };
    this.#delivery = new SqliteDeliveryOps(helpers);
    this.#node = new SqliteNodeOps(helpers);
    this.#sessions = new SqliteSessionOps(helpers);
  }

  /** Prepared statements are cached by SQL text. */
  protected sql(text: string): ReturnType<DatabaseSync["prepare"]> {
    let statement = this.#statements.get(text);
    if (!statement) {
      statement = this.db.prepare(text);
      this.#statements.set(text, statement);
    }
    return statement;
  }

  protected get<T>(text: string, params: SQLInputValue[], map: (r: Row) => T): T | undefined {
    const row = this.sql(text).get(...params) as Row | undefined;
    return row ? map(row) : undefined;
  }

  protected all<T>(text: string, params: SQLInputValue[], map: (r: Row) => T): T[] {
    return (this.sql(text).all(...params) as Row[]).map(map);
  }

  protected run(text: string, params: SQLInputValue[]): number {
    return Number(this.sql(text).run(...params).changes);
  }

  /** `UPDATE table SET updated_at, <the defined columns> WHERE id`; returns the rows changed. */
  protected updateColumns(
    table: string,
    id: string,
    updatedAt: number,
    columns: Record<string, SQLInputValue | undefined>,
  ): number {
    const sets: string[] = ["updated_at = ?"];
    const params: SQLInputValue[] = [updatedAt];
    for (const [column, value] of Object.entries(columns)) {
      if (value === undefined) continue;
      sets.push(`${column} = ?`);
      params.push(value);
    }
    return this.run(`UPDATE ${table} SET ${sets.join(", ")} WHERE id = ?`, [...params, id]);
  }

  /** Newest-first page over `table` filtered by `where`, bounded by seq cursors. */
  protected page<T>(
    table: string,
    where: string,
    params: SQLInputValue[],
    q: PageQuery,
    map: (r: Row) => T,
  ): Page<T> {
    const total = (
      this.sql(`SELECT count(*) AS n FROM ${table} WHERE ${where}`).get(...params) as { n: number }
    ).n;
    let items: T[];
    if (q.beforeSeq !== undefined) {
      // Toward newer items: take the nearest ones above the cursor, then restore newest-first order.
      items = this.all(
        `SELECT * FROM ${table} WHERE ${where} AND seq > ? ORDER BY seq ASC ${limitParam}`,
        [...params, q.beforeSeq, q.limit],
        map,
      ).reverse();
    } else if (q.afterSeq !== undefined) {
      items = this.all(
        `SELECT * FROM ${table} WHERE ${where} AND seq < ? ORDER BY seq DESC ${limitParam}`,
        [...params, q.afterSeq, q.limit],
        map,
      );
    } else {
      items = this.all(
        `SELECT * FROM ${table} WHERE ${where} ORDER BY seq DESC ${limitParam}`,
        [...params, q.limit],
        map,
      );
    }
    return { items, totalCount: total };
  }

  async countUsers(): Promise<number> {
    return (this.sql("SELECT count(*) AS n FROM users").get() as { n: number }).n;
  }

  async insertUser(u: User): Promise<void> {
    this.run(
      "INSERT INTO users (id, username, email, plan, is_admin, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
      [u.id, u.username, u.email, u.plan, u.isAdmin ? 1 : 0, u.createdAt, u.updatedAt],
    );
  }

  async getUser(id: string): Promise<User | undefined> {
    const cached = this.cachedUser(id);
    if (cached) return cached;
    const user = this.get("SELECT * FROM users WHERE id = ?", [id], toUser);
    if (user) this.#users.set(id, deepFreeze(user));
    return user;
  }

  async getUserByUsername(username: string): Promise<User | undefined> {
    return this.get("SELECT * FROM users WHERE username = ?", [username], toUser);
  }

  async insertOrg(o: Org): Promise<void> {
    this.run(
      "INSERT INTO orgs (id, orgname, name, email, owner_id, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
      [o.id, o.orgname, o.name, o.email, o.ownerId, o.createdAt, o.updatedAt],
    );
  }

  async getOrg(id: string): Promise<Org | undefined> {
    return this.get("SELECT * FROM orgs WHERE id = ?", [id], toOrg);
  }

  async getOrgByName(orgname: string): Promise<Org | undefined> {
    return this.get("SELECT * FROM orgs WHERE orgname = ?", [orgname], toOrg);
  }

  async putMember(orgId: string, userId: string, role: OrgRole, at: number): Promise<void> {
    this.run(
      "INSERT INTO org_members (org_id, user_id, role, created_at) VALUES (?, ?, ?, ?) ON CONFLICT (org_id, user_id) DO UPDATE SET role = excluded.role",
      [orgId, userId, role, at],
    );
  }

  async deleteMember(orgId: string, userId: string): Promise<boolean> {
    return this.run("DELETE FROM org_members WHERE org_id = ? AND user_id = ?", [orgId, userId]) > 0;
  }

  async listOrgsOfUser(userId: string): Promise<Org[]> {
    return this.all(
      "SELECT o.* FROM orgs o JOIN org_members m ON m.org_id = o.id WHERE m.user_id = ? ORDER BY o.seq",
      [userId],
      toOrg,
    );
  }

  async listMembers(orgId: string): Promise<Array<{ userId: string; role: OrgRole }>> {
    return this.all(
      "SELECT user_id, role FROM org_members WHERE org_id = ? ORDER BY created_at",
      [orgId],
      (r) => ({
        userId: r.user_id as string,
        role: r.role as OrgRole,
      }),
    );
  }

  // --- Accounts: the admin lists of users and organizations (listUsers, listOrgs) -------------------
  // Newest first, paged by seq like every list; kept together so that they move as one when the account
  // operations leave this file.

  async listUsers(q: PageQuery): Promise<Page<WithSeq<User>>> {
    return this.page("users", "1 = 1", [], q, withSeq(toUser));
  }

  async listOrgs(q: PageQuery): Promise<Page<WithSeq<Org>>> {
    return this.page("orgs", "1 = 1", [], q, withSeq(toOrg));
  }

  // --- End of the admin lists ----------------------------------------------------------------------

  async insertApiKey(k: ApiKey): Promise<void> {
    this.run(
      "INSERT INTO api_keys (id, user_id, name, prefix, hash, created_at, revoked_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
      [k.id, k.userId, k.name, k.prefix, k.hash, k.createdAt, k.revokedAt],
    );
  }

  async findApiKeyByHash(hash: string): Promise<{ key: ApiKey; user: User } | undefined> {
    const row = this.sql(
      `SELECT k.id AS k_id, k.user_id, k.name AS k_name, k.prefix, k.hash, k.created_at AS k_created_at, k.revoked_at,
              u.* FROM api_keys k JOIN users u ON u.id = k.user_id WHERE k.hash = ? AND k.revoked_at IS NULL`,
    ).get(hash) as Row | undefined;
    if (!row) return undefined;
    return {
      key: toKey({ ...row, id: row.k_id, name: row.k_name, created_at: row.k_created_at }),
      user: toUser(row),
    };
  }

  async listApiKeys(userId: string): Promise<ApiKey[]> {
    return this.all("SELECT * FROM api_keys WHERE user_id = ? ORDER BY seq DESC", [userId], toKey);
  }

  async revokeApiKey(id: string, at: number): Promise<boolean> {
    return this.run("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", [at, id]) > 0;
  }

  // --- Console sessions: the SQL is in sessions.ts ---
  async insertSession(session: SessionRecord): Promise<void> {
    this.#sessions.insertSession(session);
  }
  async findSession(id: string, now: number): Promise<{ session: SessionRecord; user: User } | undefined> {
    return this.#sessions.findSession(id, now);
  }
  async listSessions(userId: string, now: number): Promise<SessionRecord[]> {
    return this.#sessions.listSessions(userId, now);
  }
  async deleteSession(userId: string, id: string): Promise<boolean> {
    return this.#sessions.deleteSession(userId, id);
  }
  async trimSessions(userId: string, keep: number): Promise<number> {
    return this.#sessions.trimSessions(userId, keep);
  }
  async pruneSessions(now: number): Promise<number> {
    return this.#sessions.pruneSessions(now);
  }
  // --- End of console sessions ---

  async insertWebhook(w: Webhook): Promise<void> {
    this.run(
      `INSERT INTO webhooks (id, owner_id, created_by, name, description, url, active, signing_secret_sealed, allow_private, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      [
        w.id,
        w.ownerId,
        w.createdBy,
        w.name,
        w.description,
        w.url,
        w.active ? 1 : 0,
        w.signingSecretSealed,
        w.allowPrivate ? 1 : 0,
        w.createdAt,
        w.updatedAt,
      ],
    );
  }

  async getWebhook(id: string): Promise<Webhook | undefined> {
    const cached = this.#webhooks.get(id);
    if (cached) return cached;
    const webhook = this.get("SELECT * FROM webhooks WHERE id = ?", [id], toWebhook);
    if (webhook) this.#webhooks.set(id, deepFreeze(webhook));
    return webhook;
  }

  async listWebhooks(ownerIds: string[], q: PageQuery): Promise<Page<WithSeq<Webhook>>> {
    return this.page("webhooks", `owner_id IN (${placeholders(ownerIds)})`, ownerIds, q, toWebhook);
  }

  async updateWebhook(id: string, patch: WebhookPatch): Promise<Webhook | undefined> {
    const columns: Record<string, SQLInputValue | undefined> = {
      name: patch.name,
      description: patch.description,
      url: patch.url,
      active: patch.active === undefined ? undefined : patch.active ? 1 : 0,
      allow_private: patch.allowPrivate === undefined ? undefined : patch.allowPrivate ? 1 : 0,
    };
    this.#webhooks.delete(id);
    if (this.updateColumns("webhooks", id, patch.updatedAt, columns) === 0) return undefined;
    if (patch.active !== undefined) this.#delivery.parkDeliveries(id, patch.active, patch.updatedAt * 1000);
    return this.getWebhook(id);
  }

  async deleteWebhook(id: string): Promise<boolean> {
    this.#webhooks.delete(id);
    return this.run("DELETE FROM webhooks WHERE id = ?", [id]) > 0;
  }

  async upsertSubscription(s: Subscription): Promise<Subscription> {
    this.#matches.clear();
    this.run(
      `INSERT INTO subscriptions (id, owner_id, emitter_id, listener_id, event_name, created_at) VALUES (?, ?, ?, ?, ?, ?)
       ON CONFLICT (owner_id, emitter_id, listener_id, event_name) DO NOTHING`,
      [s.id, s.ownerId, s.emitterId, s.listenerId, s.eventName, s.createdAt],
    );
    return this.get(
      "SELECT * FROM subscriptions WHERE owner_id = ? AND emitter_id = ? AND listener_id = ? AND event_name = ?",
      [s.ownerId, s.emitterId, s.listenerId, s.eventName],
      toSubscription,
    )!;
  }

  async listSubscriptions(ownerIds: string[], q: PageQuery): Promise<Page<WithSeq<Subscription>>> {
    return this.page("subscriptions", `owner_id IN (${placeholders(ownerIds)})`, ownerIds, q, (r) => ({
      ...toSubscription(r),
      seq: r.seq as number,
    }));
  }

  async deleteSubscriptions(
    ownerIds: string[],
    m: { emitterId: string; listenerId: string; eventName: string },
  ): Promise<Subscription[]> {
    const where = `owner_id IN (${placeholders(ownerIds)}) AND emitter_id = ? AND listener_id = ? AND event_name = ?`;
    const params = [...ownerIds, m.emitterId, m.listenerId, m.eventName];
    const found = this.all(`SELECT * FROM subscriptions WHERE ${where}`, params, toSubscription);
    this.#matches.clear();
    this.run(`DELETE FROM subscriptions WHERE ${where}`, params);
    return found;
  }

  async deleteSubscriptionsOf(resourceId: string): Promise<number> {
    this.#matches.clear();
    return (
      this.run("DELETE FROM subscriptions WHERE emitter_id = ? OR listener_id = ?", [
        resourceId,
        resourceId,
      ]) + this.run("DELETE FROM auto_subscriptions WHERE listener_id = ?", [resourceId])
    );
  }

  async upsertAutoSubscription(a: AutoSubscription): Promise<AutoSubscription> {
    this.run(
      `INSERT INTO auto_subscriptions (id, owner_id, listener_id, event_name, created_at) VALUES (?, ?, ?, ?, ?)
       ON CONFLICT (owner_id, listener_id, event_name) DO NOTHING`,
      [a.id, a.ownerId, a.listenerId, a.eventName, a.createdAt],
    );
    return this.get(
      "SELECT * FROM auto_subscriptions WHERE owner_id = ? AND listener_id = ? AND event_name = ?",
      [a.ownerId, a.listenerId, a.eventName],
      toAutoSubscription,
    )!;
  }

  async listAutoSubscriptions(ownerIds: string[]): Promise<AutoSubscription[]> {
    return this.all(
      `SELECT * FROM auto_subscriptions WHERE owner_id IN (${placeholders(ownerIds)}) ORDER BY seq DESC`,
      ownerIds,
      toAutoSubscription,
    );
  }

  async resourceOwner(id: string): Promise<string | undefined> {
    const prefix = id.slice(0, id.indexOf("_"));
    const table = ownedTables[prefix];
    if (!table) return undefined;
    const emitter = prefix === "dc" || prefix === "p";
    const cached = emitter ? this.#emitterOwners.get(id) : undefined;
    if (cached !== undefined) return cached;
    const owner = this.get(`SELECT owner_id FROM ${table} WHERE id = ?`, [id], (r) => r.owner_id as string);
    if (emitter && owner !== undefined) this.#emitterOwners.set(id, owner);
    return owner;
  }

  async getUsage(userId: string, day: string): Promise<Usage> {
    this.#settle();
    return (
      this.get(
        "SELECT invocations, compute_ms FROM usage_daily WHERE user_id = ? AND day = ?",
        [userId, day],
        (r) => ({
          invocations: r.invocations as number,
          computeMs: r.compute_ms as number,
        }),
      ) ?? { invocations: 0, computeMs: 0 }
    );
  }

  async addUsage(userId: string, day: string, d: Usage): Promise<void> {
    const held = this.#deferred?.usage;
    if (!held) return this.#addUsage(userId, day, d);
    const key = `${userId}\0${day}`;
    const sum = held.get(key);
    if (sum) {
      sum.invocations += d.invocations;
      sum.computeMs += d.computeMs;
    } else held.set(key, { userId, day, invocations: d.invocations, computeMs: d.computeMs });
  }

  async reserveInvocation(userId: string, day: string, limits: UsageLimits): Promise<boolean> {
    this.#settle();
    return (
      this.run(
        `INSERT INTO usage_daily (user_id, day, invocations, compute_ms)
           SELECT ?1, ?2, 1, 0 WHERE ?3 > 0 AND ?4 > 0
         ON CONFLICT (user_id, day) DO UPDATE SET invocations = invocations + 1
           WHERE invocations < ?3 AND compute_ms < ?4`,
        [userId, day, limits.invocations, limits.computeMs],
      ) > 0
    );
  }

  async getMeta(key: string): Promise<string | undefined> {
    return this.#node.getMeta(key);
  }
  async putMetaIfAbsent(key: string, value: string): Promise<string> {
    return this.#node.putMetaIfAbsent(key, value);
  }
  async anySealedSecret(): Promise<string | undefined> {
    return this.#node.anySealedSecret();
  }
  /** One connection runs one transaction at a time: every transaction holds every lock already. */
  async acquireTransactionLock(_name: string): Promise<void> {}
  async countRateLimitHit(key: string, nowMs: number, windowMs: number): Promise<RateLimitCount> {
    return this.#node.countRateLimitHit(key, nowMs, windowMs);
  }
  async pruneRateLimits(beforeMs: number): Promise<number> {
    return this.#node.pruneRateLimits(beforeMs);
  }

  #addUsage(userId: string, day: string, d: Usage): void {
    this.run(
      `INSERT INTO usage_daily (user_id, day, invocations, compute_ms) VALUES (?, ?, ?, ?)
       ON CONFLICT (user_id, day) DO UPDATE SET invocations = invocations + excluded.invocations,
       compute_ms = compute_ms + excluded.compute_ms`,
      [userId, day, d.invocations, d.computeMs],
    );
  }

  async insertComponent(c: ComponentRecord): Promise<void> {
    this.run(
      `INSERT INTO components (id, owner_id, key, name, version, code, code_hash, component_url, meta_json, dependencies_json, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      [
        c.id,
        c.ownerId,
        c.key,
        c.name,
        c.version,
        c.code,
        c.codeHash,
        c.componentUrl,
        JSON.stringify(c.meta),
        JSON.stringify(c.dependencies),
        c.createdAt,
        c.updatedAt,
      ],
    );
  }

  async getComponent(id: string): Promise<ComponentRecord | undefined> {
    return this.get("SELECT * FROM components WHERE id = ?", [id], toComponent);
  }

  async findComponentByKey(ownerIds: string[], key: string): Promise<ComponentRecord | undefined> {
    return this.get(
      `SELECT * FROM components WHERE owner_id IN (${placeholders(ownerIds)}) AND key = ? ORDER BY seq DESC LIMIT 1`,
      [...ownerIds, key],
      toComponent,
    );
  }

  async listLatestComponents(ownerIds: string[], q: PageQuery): Promise<Page<WithSeq<ComponentRecord>>> {
    const owners = placeholders(ownerIds);
    return this.page(
      "components",
      `owner_id IN (${owners}) AND seq IN (SELECT max(seq) FROM components WHERE owner_id IN (${owners}) GROUP BY owner_id, coalesce(key, id))`,
      [...ownerIds, ...ownerIds],
      q,
      (r) => ({ ...toComponent(r), seq: r.seq as number }),
    );
  }

  async insertSource(s: SourceRecord): Promise<void> {
    this.#sourcesByEndpoint.clear();
    this.#sourcesById.clear();
    this.run(
      `INSERT INTO sources (id, owner_id, created_by, component_id, name, name_slug, active, props_json, endpoint_id, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      [
        s.id,
        s.ownerId,
        s.createdBy,
        s.componentId,
        s.name,
        s.nameSlug,
        s.active ? 1 : 0,
        JSON.stringify(s.props),
        s.endpointId,
        s.createdAt,
        s.updatedAt,
      ],
    );
  }

  async getSource(id: string): Promise<SourceRecord | undefined> {
    const cached = this.cachedSource(id);
    if (cached) return cached;
    const source = this.get("SELECT * FROM sources WHERE id = ?", [id], toSource);
    if (source) this.#sourcesById.set(id, deepFreeze(source));
    return source;
  }

  /** The cached row of a source, if any, read without SQL. */
  cachedSource(id: string): SourceRecord | undefined {
    return this.#sourcesById.get(id);
  }

  /** The cached row of an endpoint's source, if any, read without SQL (see `openSqliteStorage`). */
  cachedSourceByEndpoint(endpointId: string): SourceRecord | undefined {
    return this.#sourcesByEndpoint.get(endpointId);
  }

  /** The cached row of a user, if any, read without SQL. */
  cachedUser(id: string): User | undefined {
    return this.#users.get(id);
  }

  async getSourceByEndpoint(endpointId: string): Promise<SourceRecord | undefined> {
    const cached = this.cachedSourceByEndpoint(endpointId);
    if (cached) return cached;
    const source = this.get("SELECT * FROM sources WHERE endpoint_id = ?", [endpointId], toSource);
    if (source) this.#sourcesByEndpoint.set(endpointId, deepFreeze(source));
    return source;
  }

  /** Forgets cached rows: after a rollback, since the transaction may have cached rows it wrote. */
  dropCaches(): void {
    this.#webhooks.clear();
    this.#sourcesByEndpoint.clear();
    this.#sourcesById.clear();
    this.#windows.clear();
    this.#emitterOwners.clear();
    this.#matches.clear();
  }

  /** Starts holding back clock and usage writes until `endDeferral` (a transaction began). */
  deferWrites(): void {
    this.#deferred = { clocks: new Map(), usage: new Map() };
  }

  /** Stops holding writes back: makes them (before COMMIT) or, with `discard`, drops them (ROLLBACK). */
  endDeferral(discard = false): void {
    const d = this.#deferred;
    this.#deferred = undefined;
    if (d && !discard) this.#write(d);
  }

  /** Makes the held-back writes now and keeps deferring (a read or delete inside the transaction needs them). */
  #settle(): void {
    const d = this.#deferred;
    if (!d) return;
    this.#deferred = undefined;
    this.#write(d);
    this.deferWrites();
  }

  #write(d: Deferred): void {
    for (const [emitterId, c] of d.clocks) this.#putClock(emitterId, c.ms, c.seq);
    for (const u of d.usage.values()) this.#addUsage(u.userId, u.day, u);
  }

  async getSourceBySlug(ownerIds: string[], slug: string): Promise<SourceRecord | undefined> {
    return this.get(
      `SELECT * FROM sources WHERE owner_id IN (${placeholders(ownerIds)}) AND name_slug = ? ORDER BY seq DESC LIMIT 1`,
      [...ownerIds, slug],
      toSource,
    );
  }

  async listSlugs(ownerId: string, base: string): Promise<string[]> {
    return this.all(
      "SELECT name_slug FROM sources WHERE owner_id = ? AND (name_slug = ? OR substr(name_slug, 1, ?) = ?)",
      [ownerId, base, base.length + 1, `${base}-`],
      (r) => r.name_slug as string,
    );
  }

  async listSources(ownerIds: string[], q: PageQuery): Promise<Page<WithSeq<SourceRecord>>> {
    return this.page("sources", `owner_id IN (${placeholders(ownerIds)})`, ownerIds, q, toSource);
  }

  async listActiveSourceIds(): Promise<string[]> {
    return this.all("SELECT id FROM sources WHERE active = 1 ORDER BY seq", [], (r) => r.id as string);
  }

  async updateSource(id: string, patch: SourcePatch): Promise<SourceRecord | undefined> {
    const columns: Record<string, SQLInputValue | undefined> = {
      component_id: patch.componentId,
      name: patch.name,
      name_slug: patch.nameSlug,
      active: patch.active === undefined ? undefined : patch.active ? 1 : 0,
      props_json: patch.props === undefined ? undefined : JSON.stringify(patch.props),
      endpoint_id: patch.endpointId,
    };
    this.#sourcesByEndpoint.clear();
    this.#sourcesById.clear();
    if (this.updateColumns("sources", id, patch.updatedAt, columns) === 0) return undefined;
    if (patch.active !== undefined) this.#delivery.parkDeliveries(id, patch.active, patch.updatedAt * 1000);
    return this.getSource(id);
  }

  async deleteSource(id: string): Promise<boolean> {
    this.#settle();
    this.#sourcesByEndpoint.clear();
    this.#sourcesById.clear();
    this.#emitterOwners.delete(id);
    const removed = this.run("DELETE FROM sources WHERE id = ?", [id]) > 0;
    for (const table of ["source_db", "dedupe_state", "timers"])
      this.run(`DELETE FROM ${table} WHERE source_id = ?`, [id]);
    this.#windows.clear();
    this.run("DELETE FROM events WHERE emitter_id = ?", [id]);
    this.run("DELETE FROM emitter_clock WHERE emitter_id = ?", [id]);
    return removed;
  }

  async getSourceDb(sourceId: string): Promise<{ data: Record<string, unknown>; version: number }> {
    return (
      this.get("SELECT data_json, version FROM source_db WHERE source_id = ?", [sourceId], (r) => ({
        data: JSON.parse(r.data_json as string) as Record<string, unknown>,
        version: r.version as number,
      })) ?? { data: {}, version: 0 }
    );
  }

  async putSourceDb(sourceId: string, data: Record<string, unknown>, version: number): Promise<void> {
    this.run(
      `INSERT INTO source_db (source_id, data_json, version) VALUES (?, ?, ?)
       ON CONFLICT (source_id) DO UPDATE SET data_json = excluded.data_json, version = excluded.version`,
      [sourceId, JSON.stringify(data), version],
    );
  }

  async getDedupeState(sourceId: string): Promise<unknown> {
    return this.get("SELECT state_json FROM dedupe_state WHERE source_id = ?", [sourceId], (r) =>
      JSON.parse(r.state_json as string),
    );
  }

  async putDedupeState(sourceId: string, state: unknown): Promise<void> {
    this.run(
      `INSERT INTO dedupe_state (source_id, state_json) VALUES (?, ?)
       ON CONFLICT (source_id) DO UPDATE SET state_json = excluded.state_json`,
      [sourceId, JSON.stringify(state)],
    );
  }

  async replaceTimers(sourceId: string, timers: TimerRecord[]): Promise<void> {
    this.run("DELETE FROM timers WHERE source_id = ?", [sourceId]);
    for (const t of timers) {
      this.run(
        "INSERT INTO timers (source_id, prop_name, interval_seconds, cron, timezone, next_run_ms) VALUES (?, ?, ?, ?, ?, ?)",
        [t.sourceId, t.propName, t.intervalSeconds, t.cron, t.timezone, t.nextRunMs],
      );
    }
  }

  async listTimers(sourceId: string): Promise<TimerRecord[]> {
    return this.all("SELECT * FROM timers WHERE source_id = ? ORDER BY prop_name", [sourceId], toTimer);
  }

  async dueTimers(nowMs: number, limit: number): Promise<TimerRecord[]> {
    return this.all(
      `SELECT * FROM timers WHERE next_run_ms <= ? ORDER BY next_run_ms ${limitParam}`,
      [nowMs, limit],
      toTimer,
    );
  }

  async claimTimer(
    sourceId: string,
    propName: string,
    expectedNextMs: number,
    nextMs: number,
  ): Promise<boolean> {
    return (
      this.run(
        "UPDATE timers SET next_run_ms = ? WHERE source_id = ? AND prop_name = ? AND next_run_ms = ?",
        [nextMs, sourceId, propName, expectedNextMs],
      ) > 0
    );
  }

  async nextTimerMs(): Promise<number | undefined> {
    const row = this.sql("SELECT min(next_run_ms) AS m FROM timers").get() as { m: number | null };
    return row.m ?? undefined;
  }

  async getEmitterClock(emitterId: string): Promise<{ ms: number; seq: number } | undefined> {
    this.#settle();
    return this.get("SELECT last_ms, last_seq FROM emitter_clock WHERE emitter_id = ?", [emitterId], (r) => ({
      ms: r.last_ms as number,
      seq: r.last_seq as number,
    }));
  }

  async putEmitterClock(emitterId: string, ms: number, seq: number): Promise<void> {
    const held = this.#deferred?.clocks;
    if (held) held.set(emitterId, { ms, seq });
    else this.#putClock(emitterId, ms, seq);
  }

  #putClock(emitterId: string, ms: number, seq: number): void {
    this.run(
      `INSERT INTO emitter_clock (emitter_id, last_ms, last_seq) VALUES (?, ?, ?)
       ON CONFLICT (emitter_id) DO UPDATE SET last_ms = excluded.last_ms, last_seq = excluded.last_seq`,
      [emitterId, ms, seq],
    );
  }

  async insertEvent(e: EventRecord, keep: number): Promise<void> {
    const order = this.#window(e.emitterId, e.channel);
    // The cached window changes only after each statement succeeded, so a failed one leaves it true.
    // A window holding more than `keep` (a smaller `keep` than before) loses its oldest first.
    while (order.length > keep) {
      this.run("DELETE FROM events WHERE emitter_id = ? AND channel = ? AND slot = ?", [
        e.emitterId,
        e.channel,
        order[0]!,
      ]);
      order.shift();
    }
    const values = [
      e.id,
      e.idMs,
      e.idSeq,
      e.indexedAtMs,
      JSON.stringify(e.event ?? null),
      JSON.stringify(e.meta),
      e.emitterId,
      e.channel,
    ];
    if (order.length === keep) {
      // Full: the new event takes the oldest one's row.
      const oldest = order[0]!;
      this.run(
        `UPDATE events SET id = ?, id_ms = ?, id_seq = ?, indexed_at_ms = ?, event_json = ?, meta_json = ?
         WHERE emitter_id = ? AND channel = ? AND slot = ?`,
        [...values, oldest],
      );
      order.shift();
      order.push(oldest);
      return;
    }
    // Filling: the lowest slot number no event holds (a deleted event's, or the next one up).
    const used = new Set(order);
    let slot = 0;
    while (used.has(slot)) slot++;
    this.run(
      `INSERT INTO events (id, id_ms, id_seq, indexed_at_ms, event_json, meta_json, emitter_id, channel, slot)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      [...values, slot],
    );
    order.push(slot);
  }

  /** The slots of a window's events, oldest first. */
  #window(emitterId: string, channel: string): number[] {
    return this.#windows.getOrSet(`${emitterId}\0${channel}`, () =>
      this.all(
        "SELECT slot FROM events WHERE emitter_id = ? AND channel = ? ORDER BY id_ms, id_seq",
        [emitterId, channel],
        (r) => r.slot as number,
      ),
    );
  }

  async listChannels(emitterId: string): Promise<string[]> {
    this.#settle();
    return this.all(
      "SELECT DISTINCT channel FROM events WHERE emitter_id = ? ORDER BY channel",
      [emitterId],
      (r) => r.channel as string,
    );
  }

  async listEvents(emitterId: string, q: EventQuery): Promise<Page<EventRecord>> {
    this.#settle();
    const base = "emitter_id = ? AND channel = ?";
    const params: SQLInputValue[] = [emitterId, q.channel];
    const total = (this.sql(`SELECT count(*) AS n FROM events WHERE ${base}`).get(...params) as { n: number })
      .n;
    let items: EventRecord[];
    if (q.before) {
      items = this.all(
        `SELECT * FROM events WHERE ${base} AND (id_ms > ? OR (id_ms = ? AND id_seq > ?)) ORDER BY id_ms ASC, id_seq ASC ${limitParam}`,
        [...params, q.before.ms, q.before.ms, q.before.seq, q.limit],
        toEvent,
      ).reverse();
    } else if (q.after) {
      items = this.all(
        `SELECT * FROM events WHERE ${base} AND (id_ms < ? OR (id_ms = ? AND id_seq < ?)) ORDER BY id_ms DESC, id_seq DESC ${limitParam}`,
        [...params, q.after.ms, q.after.ms, q.after.seq, q.limit],
        toEvent,
      );
    } else {
      items = this.all(
        `SELECT * FROM events WHERE ${base} ORDER BY id_ms DESC, id_seq DESC ${limitParam}`,
        [...params, q.limit],
        toEvent,
      );
    }
    return { items, totalCount: total };
  }

  async deleteEvents(
    emitterId: string,
    from: { ms: number; seq: number } | undefined,
    to: { ms: number; seq: number } | undefined,
    channel?: string,
  ): Promise<number> {
    this.#settle();
    const where = ["emitter_id = ?"];
    const params: SQLInputValue[] = [emitterId];
    if (channel !== undefined) {
      where.push("channel = ?");
      params.push(channel);
    }
    if (from) {
      where.push("(id_ms > ? OR (id_ms = ? AND id_seq >= ?))");
      params.push(from.ms, from.ms, from.seq);
    }
    if (to) {
      where.push("(id_ms < ? OR (id_ms = ? AND id_seq <= ?))");
      params.push(to.ms, to.ms, to.seq);
    }
    this.#windows.clear();
    return this.run(`DELETE FROM events WHERE ${where.join(" AND ")}`, params);
  }

  async insertAppAccount(a: AppAccount): Promise<void> {
    this.run(
      `INSERT INTO app_accounts (id, owner_id, app, name, credentials_sealed, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
      [a.id, a.ownerId, a.app, a.name, a.credentialsSealed, a.createdAt, a.updatedAt],
    );
  }

  async getAppAccount(id: string): Promise<AppAccount | undefined> {
    return this.get("SELECT * FROM app_accounts WHERE id = ?", [id], toAppAccount);
  }

  async listAppAccounts(ownerIds: string[], q: PageQuery): Promise<Page<WithSeq<AppAccount>>> {
    return this.page("app_accounts", `owner_id IN (${placeholders(ownerIds)})`, ownerIds, q, toAppAccount);
  }

  async deleteAppAccount(id: string): Promise<boolean> {
    return this.run("DELETE FROM app_accounts WHERE id = ?", [id]) > 0;
  }

  // External workflows and the deliveries outbox: SQL in delivery-ops.ts.
  async insertWorkflow(w: Workflow): Promise<void> {
    this.#delivery.insertWorkflow(w);
  }
  async getWorkflow(id: string): Promise<Workflow | undefined> {
    return this.#delivery.getWorkflow(id);
  }
  async listWorkflows(ownerIds: string[], q: PageQuery): Promise<Page<WithSeq<Workflow>>> {
    return this.#delivery.listWorkflows(ownerIds, q);
  }
  async deleteWorkflow(id: string): Promise<boolean> {
    this.#emitterOwners.delete(id);
    return this.#delivery.deleteWorkflow(id);
  }
  async matchSubscriptions(
    emitterId: string,
    ownerId: string | undefined,
    channel: string,
  ): Promise<Subscription[]> {
    return this.#matches.getOrSet(`${emitterId}\0${ownerId ?? ""}\0${channel}`, () =>
      deepFreeze(this.#delivery.matchSubscriptions(emitterId, ownerId, channel)),
    );
  }
  async insertDeliveries(deliveries: Delivery[]): Promise<void> {
    this.#delivery.insertDeliveries(deliveries);
  }
  async getDelivery(id: string): Promise<Delivery | undefined> {
    return this.#delivery.getDelivery(id);
  }
  async claimDeliveries(claim: DeliveryClaim): Promise<Delivery[]> {
    return this.#delivery.claimDeliveries(claim);
  }
  async releaseDeliveries(ids: string[], claimToken: string): Promise<void> {
    this.#delivery.releaseDeliveries(ids, claimToken);
  }
  async resetDeliveryClaims(claimToken: string): Promise<number> {
    return this.#delivery.resetDeliveryClaims(claimToken);
  }
  async renewDeliveryClaims(claimToken: string, untilMs: number, ids: string[]): Promise<number> {
    return this.#delivery.renewDeliveryClaims(claimToken, untilMs, ids);
  }
  async updateDelivery(id: string, patch: DeliveryPatch): Promise<boolean> {
    return this.#delivery.updateDelivery(id, patch);
  }
  async insertDeliveryAttempt(attempt: DeliveryAttempt): Promise<void> {
    this.#delivery.insertDeliveryAttempt(attempt);
  }
  async settleDelivery(
    id: string,
    patch: DeliveryPatch,
    attempt: DeliveryAttempt | undefined,
  ): Promise<void> {
    if (this.#delivery.updateDelivery(id, patch) && attempt) this.#delivery.insertDeliveryAttempt(attempt);
  }
  async listDeliveries(
    listenerId: string,
    q: PageQuery,
    status?: DeliveryStatus,
  ): Promise<Page<WithSeq<Delivery>>> {
    return this.#delivery.listDeliveries(listenerId, q, status);
  }
  async listDeliveryAttempts(deliveryIds: string[]): Promise<DeliveryAttempt[]> {
    return this.#delivery.listDeliveryAttempts(deliveryIds);
  }
  async cancelDeliveries(listenerId: string, ids: string[]): Promise<number> {
    return this.#delivery.cancelDeliveries(listenerId, ids);
  }

  async requeueDelivery(id: string, nowMs: number): Promise<boolean> {
    return this.#delivery.requeueDelivery(id, nowMs);
  }
  async requeueFailedDeliveries(listenerId: string, sinceMs: number, nowMs: number): Promise<number> {
    return this.#delivery.requeueFailedDeliveries(listenerId, sinceMs, nowMs);
  }
  async countPendingDeliveries(nowMs: number): Promise<{ pending: number; due: number }> {
    return this.#delivery.countPendingDeliveries(nowMs);
  }
  async nextDeliveryMs(): Promise<number | undefined> {
    return this.#delivery.nextDeliveryMs();
  }
  async pruneDeliveries(beforeMs: number): Promise<number> {
    return this.#delivery.pruneDeliveries(beforeMs);
  }

  // One node owns a SQLite file (the data dir lock), so no other node can hold a source's lease.
  async assertSourceLease(): Promise<void> {}
}

/** Opens (creating if needed) `<dataDir>/fount.db`, applies migrations and returns the store. */
export function openSqliteStorage(options: { dataDir: string; file?: string }): Storage {
  mkdirSync(options.dataDir, { recursive: true });
  // Sandboxed executors run under other uids and may traverse into the package cache below the data
  // dir, but must never list it or read the database: 0711 on the dir, 0600 on the files.
  chmodSync(options.dataDir, 0o711);
  const file = options.file ?? path.join(options.dataDir, "fount.db");
  const db = new DatabaseSync(file);
  db.exec(
    "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 5000;",
  );
  for (const suffix of ["", "-wal", "-shm"]) {
    try {
      chmodSync(file + suffix, 0o600);
    } catch {
      // -wal/-shm exist only once written; they inherit the umask until then.
    }
  }
  migrate(db);

  const ops = new SqliteOps(db);
  const lock = new AsyncLock();
  let closed = false;
  /** True while a transaction, which may change cached rows before it commits or rolls back, is open. */
  let inTransaction = false;
  const locked = lockedOperations(ops, lock);
  const cacheFirst =
    <R>(peek: (id: string) => R | undefined, read: (id: string) => Promise<R | undefined>) =>
    (id: string): Promise<R | undefined> => {
      const hit = inTransaction ? undefined : peek(id);
      return hit ? Promise.resolve(hit) : read(id);
    };
  return {
    ...locked,
    // Read on every endpoint hit: a cached row is answered without queuing for the lock (a few promise
    // turns per hit), except while a transaction is open, whose writes are not committed yet.
    getSourceByEndpoint: cacheFirst((id) => ops.cachedSourceByEndpoint(id), locked.getSourceByEndpoint),
    getUser: cacheFirst((id) => ops.cachedUser(id), locked.getUser),
    getSource: cacheFirst((id) => ops.cachedSource(id), locked.getSource),
    driver: "sqlite",
    capabilities: { listenNotify: false, skipLocked: false, sharedByNodes: false },
    // The file lives with the process: it cannot go away while the server runs.
    health: alwaysAvailable,
    transaction: <T>(fn: (tx: StorageOps) => Promise<T>): Promise<T> =>
      lock.run(async () => {
        db.exec("BEGIN IMMEDIATE");
        ops.deferWrites();
        inTransaction = true;
        try {
          const result = await fn(ops);
          ops.endDeferral();
          db.exec("COMMIT");
          return result;
        } catch (err) {
          ops.endDeferral(true);
          db.exec("ROLLBACK");
          ops.dropCaches();
          throw err;
        } finally {
          inTransaction = false;
        }
      }),
    ping: async () => {
      await lock.run(() => db.prepare("SELECT 1").get());
    },
    close: async () => {
      if (closed) return;
      closed = true;
      await lock.run(() => db.close());
    },
  };
}

/** Every StorageOps method of `ops`, each running under the lock so it never joins another's transaction. */
function lockedOperations(ops: SqliteOps, lock: AsyncLock): StorageOps {
  const out: Record<string, unknown> = {};
  for (const name of Object.getOwnPropertyNames(SqliteOps.prototype)) {
    const op = (ops as unknown as Record<string, unknown>)[name];
    // `cached…` methods are synchronous peeks at the driver's caches, not operations of the port.
    if (name === "constructor" || name.startsWith("cached") || typeof op !== "function") continue;
    out[name] = (...args: unknown[]) => lock.run(() => (op as (...a: unknown[]) => unknown).apply(ops, args));
  }
  return out as unknown as StorageOps;
}
