/** Users, organizations, memberships and API keys: creation, lookup and the first-start bootstrap. */
import type { Clock } from "../../clock.ts";
import { hashApiKey } from "../../crypto/secret-box.ts";
import { AppError, invalidParameter, notFound } from "../../errors.ts";
import { newId, randomString } from "../../ids.ts";
import type { Storage } from "../../storage/port.ts";
import type { ApiKey, Org, Plan, Principal, User } from "../types.ts";

/** A freshly created API key: the only moment its secret is known. */
export interface IssuedKey {
  key: Omit<ApiKey, "hash">;
  secret: string;
}

export class Accounts {
  readonly #store: Storage;
  readonly #clock: Clock;

  /**
   * True from a start that defers the bootstrap (main.ts makes the admin once the server listens) until
   * it is done: the node is live but not ready, since a `FOUNT_BOOTSTRAP_API_KEY` would not open yet.
   */
  bootstrapPending = false;

  constructor(store: Storage, clock: Clock) {
    this.#store = store;
    this.#clock = clock;
  }

  #now(): number {
    return Math.floor(this.#clock.now() / 1000);
  }

  /**
   * On an empty store, creates the admin user and its first key (the given bootstrap key, or a new
   * one). Returns the key's secret only when it was created now, so that it is shown once. Nodes
   * starting at once on an empty store take turns: one creates the admin, the others find it.
   */
  async bootstrap(bootstrapKey: string | undefined): Promise<{ user: User; secret: string } | undefined> {
    const created = await this.#store.transaction(async (tx) => {
      await tx.acquireTransactionLock("bootstrap");
      if ((await tx.countUsers()) > 0) return undefined;
      const now = this.#now();
      const user: User = {
        id: newId("u"),
        username: "admin",
        email: "admin@localhost",
        plan: "paid",
        isAdmin: true,
        createdAt: now,
        updatedAt: now,
      };
      await tx.insertUser(user);
      const secret = bootstrapKey ?? generateKeySecret();
      await tx.insertApiKey(keyRecord(user.id, "bootstrap", secret, now));
      return { user, secret };
    });
    this.bootstrapPending = false;
    return created;
  }

  async createUser(input: { username: string; email: string; plan?: Plan; isAdmin?: boolean }): Promise<{
    user: User;
    apiKey: IssuedKey;
  }> {
    validateSlug("username", input.username);
    return this.#store.transaction(async (tx) => {
      if (await tx.getUserByUsername(input.username)) {
        throw new AppError("conflict", `A user named ${input.username} exists already`, {
          details: { field: "username" },
        });
      }
      const now = this.#now();
      const user: User = {
        id: newId("u"),
        username: input.username,
        email: input.email,
        plan: input.plan ?? "free",
        isAdmin: input.isAdmin ?? false,
        createdAt: now,
        updatedAt: now,
      };
      await tx.insertUser(user);
      const secret = generateKeySecret();
      const record = keyRecord(user.id, "default", secret, now);
      await tx.insertApiKey(record);
      return { user, apiKey: { key: publicKey(record), secret } };
    });
  }

  async createOrg(input: { orgname: string; name?: string; email?: string; ownerId: string }): Promise<Org> {
    validateSlug("orgname", input.orgname);
    return this.#store.transaction(async (tx) => {
      const owner = await tx.getUser(input.ownerId);
      if (!owner) throw invalidParameter("owner_id", `No user ${input.ownerId}`);
      if (await tx.getOrgByName(input.orgname)) {
        throw new AppError("conflict", `An organization named ${input.orgname} exists already`, {
          details: { field: "orgname" },
        });
      }
      const now = this.#now();
      const org: Org = {
        id: newId("o"),
        orgname: input.orgname,
        name: input.name ?? input.orgname,
        email: input.email ?? owner.email,
        ownerId: owner.id,
        createdAt: now,
        updatedAt: now,
      };
      await tx.insertOrg(org);
      await tx.putMember(org.id, owner.id, "owner", now);
      return org;
    });
  }

  async addMember(orgId: string, userId: string): Promise<void> {
    await this.#store.transaction(async (tx) => {
      if (!(await tx.getOrg(orgId))) throw notFound("Organization", orgId);
      if (!(await tx.getUser(userId))) throw invalidParameter("user_id", `No user ${userId}`);
      const members = await tx.listMembers(orgId);
      if (members.some((m) => m.userId === userId)) return;
      await tx.putMember(orgId, userId, "member", this.#now());
    });
  }

  async removeMember(orgId: string, userId: string): Promise<void> {
    await this.#store.transaction(async (tx) => {
      const org = await tx.getOrg(orgId);
      if (!org) throw notFound("Organization", orgId);
      if (org.ownerId === userId)
        throw new AppError("conflict", "The owner of an organization cannot be removed from it");
      if (!(await tx.deleteMember(orgId, userId))) throw notFound("Membership of", userId);
      // What the member routed between their own resources and the organization's stops with the
      // membership: its events would go on reaching a tenant that no longer shares them (either way).
      // What those routes had not yet delivered goes with them (a retry, or a redelivery, would carry it).
      await tx.deleteRoutesBetween(userId, orgId);
    });
  }

  async createApiKey(userId: string, name = "default"): Promise<IssuedKey> {
    if (!(await this.#store.getUser(userId))) throw notFound("User", userId);
    const secret = generateKeySecret();
    const record = keyRecord(userId, name, secret, this.#now());
    await this.#store.insertApiKey(record);
    return { key: publicKey(record), secret };
  }

  async revokeApiKey(keyId: string): Promise<void> {
    if (!(await this.#store.revokeApiKey(keyId, this.#now()))) throw notFound("API key", keyId);
  }

  /** The principal of a bearer secret, or undefined for an unknown or revoked key. */
  async authenticate(secret: string): Promise<Principal | undefined> {
    const found = await this.#store.findApiKeyByHash(hashApiKey(secret));
    if (!found) return undefined;
    const orgs = await this.#store.listOrgsOfUser(found.user.id);
    return {
      user: found.user,
      credential: { kind: "key", id: found.key.id },
      orgIds: orgs.map((o) => o.id),
    };
  }
}

/** `fnt_` plus 32 base62 characters (about 190 bits). */
export function generateKeySecret(): string {
  return `fnt_${randomString(32)}`;
}

function keyRecord(userId: string, name: string, secret: string, now: number): ApiKey {
  return {
    id: newId("key"),
    userId,
    name,
    prefix: secret.slice(0, 8),
    hash: hashApiKey(secret),
    createdAt: now,
    revokedAt: null,
  };
}

function publicKey(record: ApiKey): Omit<ApiKey, "hash"> {
  const { hash: _hash, ...rest } = record;
  return rest;
}

function validateSlug(field: string, value: string): void {
  if (!/^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,63}$/.test(value)) {
    throw invalidParameter(
      field,
      `${field} must be 1–64 letters, digits, '.', '_' or '-', starting with a letter or digit`,
    );
  }
}
