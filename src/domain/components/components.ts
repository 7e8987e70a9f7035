/**
 * Saved components: code is fetched (component_url), bundled with its packages installed, loaded in the
 * owner's sandbox to read its definition, and stored with the package versions it resolved to.
 */

import { ByteBoundedCache, estimatedBytes } from "../../bounded-cache.ts";
import type { Clock } from "../../clock.ts";
import { sha256Hex } from "../../crypto/secret-box.ts";
import { AppError, invalidParameter, notFound } from "../../errors.ts";
import { newId } from "../../ids.ts";
import type { ComponentBuilder } from "../../runtime/build.ts";
import { definitionTooLargeMessage, maxDefinitionBytes } from "../../runtime/child/guards/json-size.ts";
import { type FetchCodeOptions, fetchComponentCode } from "../../runtime/fetch-code.ts";
import type { BuiltComponent, ComponentMeta, Executor } from "../../runtime/types.ts";
import type { Storage } from "../../storage/port.ts";
import { TurnsByKey } from "../../turns.ts";
import type { ComponentRecord } from "../types.ts";

/** Largest component code accepted (bytes). */
export const maxCodeBytes = 1024 * 1024;

/** Code built for an owner and the definition its sandbox read from it (`ComponentCatalog.prepare`). */
export interface Prepared {
  built: BuiltComponent;
  meta: ComponentMeta;
}

/**
 * Bytes of saved components' records (code and definition) kept in memory. Each one's code may be 1 MiB:
 * kept for ever, every save of new code kept ~0.93 MiB of heap, and ~4,000 saves crashed the server.
 * Past this the least recently used are let go and read from the store again at their next use.
 */
export const componentCacheBytes = 32 * 1024 * 1024;

/**
 * Bytes of builds kept (their paths and package versions, under 1 KiB each: some 40,000 builds). A build
 * let go is built again at its next use, as after a restart, which costs far more than a record's read.
 */
const buildCacheBytes = 32 * 1024 * 1024;

/** A record and its build for one executor owner (`ComponentCatalog.load`). */
interface Loaded {
  record: ComponentRecord;
  built: BuiltComponent;
}

/** The owner ID of published (registry) components. */
export const registryOwner = "registry";

export class ComponentCatalog {
  readonly #store: Storage;
  readonly #builder: ComponentBuilder;
  readonly #executor: Executor;
  readonly #clock: Clock;
  readonly #fetchGuard: FetchCodeOptions["guard"];
  readonly #maxOwnerBytes: number;
  readonly #records = new ByteBoundedCache<string, ComponentRecord>({
    maxBytes: componentCacheBytes,
    sizeOf: recordBytes,
  });
  /**
   * Builds by component and executor owner: each owner runs its own copy of a bundle. They hold no
   * record, whose code would then be kept once per owner, out of the records' bound.
   */
  readonly #builds = new ByteBoundedCache<string, BuiltComponent>({
    maxBytes: buildCacheBytes,
    sizeOf: estimatedBytes,
  });
  /** Reads and builds under way, shared by concurrent misses of one key (kept in the caches once done). */
  readonly #pendingRecords = new Map<string, Promise<ComponentRecord>>();
  readonly #pendingLoads = new Map<string, Promise<Loaded>>();
  /**
   * Each owner's saves, one at a time on this node from their last check of the bound to their insert:
   * the transaction's lock alone would hold one of the store's connections per save waiting for it.
   */
  readonly #ownerSaves = new TurnsByKey(1);

  constructor(deps: {
    store: Storage;
    builder: ComponentBuilder;
    executor: Executor;
    clock: Clock;
    /** Address rules for fetching component_url (the same as for webhook deliveries). */
    fetchGuard?: FetchCodeOptions["guard"];
    /** Bytes an owner's saved components may keep (FOUNT_MAX_COMPONENT_BYTES_PER_OWNER); default unbounded. */
    maxOwnerBytes?: number;
  }) {
    this.#fetchGuard = deps.fetchGuard;
    this.#maxOwnerBytes = deps.maxOwnerBytes ?? Number.POSITIVE_INFINITY;
    this.#store = deps.store;
    this.#builder = deps.builder;
    this.#executor = deps.executor;
    this.#clock = deps.clock;
  }

  /**
   * Builds and validates code for `ownerId` and stores it as a new saved component; `prepared`: what
   * `prepare` answered for this code and owner, which is not built and inspected again. The same code
   * (and URL) saved again by the owner answers the record it saved before, as long as that is still the
   * newest of its key, and stores nothing; a save that would take the owner's records past
   * `maxOwnerBytes` is refused (`component_quota_exceeded`): by its code before it is built, and by
   * what it stores (code, definition, package versions) right before the insert.
   */
  async save(
    ownerId: string,
    input: { code?: string; url?: string },
    prepared?: Prepared,
  ): Promise<ComponentRecord> {
    let code = input.code;
    if (code === undefined) {
      if (!input.url) throw invalidParameter("component_code", "Give component_code or component_url");
      code = await fetchComponentCode(input.url, { guard: this.#fetchGuard });
    }
    if (ownerId !== registryOwner) {
      const same = await this.#store.findSameComponent(ownerId, sha256Hex(code), input.url ?? null);
      if (same) return same;
      await this.#assertRoom(ownerId, code);
    }
    const { built, meta } = prepared ?? (await this.prepare(ownerId, code));
    // Stored as text columns, where PostgreSQL refuses U+0000 (the rest of the meta is stored as JSON).
    for (const field of ["key", "name", "version"] as const) {
      if (meta[field]?.includes("\0")) {
        const message = `The component's \`${field}\` must not contain the NUL character (U+0000)`;
        throw new AppError("component_invalid", message, { details: { message } });
      }
    }
    const now = Math.floor(this.#clock.now() / 1000);
    const record: ComponentRecord = {
      id: newId("sc"),
      ownerId,
      key: meta.key ?? null,
      name: meta.name,
      version: meta.version,
      code,
      codeHash: sha256Hex(code),
      componentUrl: input.url ?? null,
      meta,
      dependencies: built.dependencies,
      createdAt: now,
      updatedAt: now,
    };
    if (ownerId === registryOwner || !Number.isFinite(this.#maxOwnerBytes))
      await this.#store.insertComponent(record);
    else {
      const saved = await this.#insertWithin(record);
      if (saved !== record) return saved;
    }
    this.#records.set(record.id, record);
    this.#builds.set(loadKey(record.id, ownerId), built);
    return record;
  }

  /**
   * Refuses code that would take the owner's saved components past their bound, before the build's
   * work. Its definition is not known yet: `#insertWithin` checks the whole record again.
   */
  async #assertRoom(ownerId: string, code: string): Promise<void> {
    if (!Number.isFinite(this.#maxOwnerBytes)) return;
    const used = await this.#store.componentBytes(ownerId);
    if (used + Buffer.byteLength(code) <= this.#maxOwnerBytes) return;
    throw this.#quotaExceeded(used, "this code");
  }

  /**
   * Stores `record` if the owner's saved components, with it, stay within their bound (as counted in
   * `stored_bytes`: code, definition, package versions); answers the record stored, which is an earlier
   * one when a save of the same code got there first. Saves of one owner take turns on this node, and
   * across nodes under a lock of the transaction, so that saves racing each other cannot all count the
   * same total and pass the bound together.
   */
  async #insertWithin(record: ComponentRecord): Promise<ComponentRecord> {
    const { ownerId } = record;
    const bytes = storedBytes(record);
    const release = (await this.#ownerSaves.take(ownerId, Number.POSITIVE_INFINITY))!;
    try {
      return await this.#store.transaction(async (tx) => {
        await tx.acquireTransactionLock(`components:${ownerId}`);
        const same = await tx.findSameComponent(ownerId, record.codeHash, record.componentUrl);
        if (same) return same;
        const used = await tx.componentBytes(ownerId);
        if (used + bytes > this.#maxOwnerBytes)
          throw this.#quotaExceeded(used, `this component (${bytes} bytes)`);
        await tx.insertComponent(record);
        return record;
      });
    } finally {
      release();
    }
  }

  #quotaExceeded(used: number, what: string): AppError {
    return new AppError(
      "component_quota_exceeded",
      `The saved components of this account take ${used} bytes; saving ${what} would pass the limit of ${this.#maxOwnerBytes} bytes`,
      { details: { used_bytes: used, limit_bytes: this.#maxOwnerBytes } },
    );
  }

  /**
   * Builds code for `ownerId` and reads its definition in the owner's sandbox (422 when it does not
   * load), storing nothing: the registry checks the key and version before it saves.
   */
  async prepare(ownerId: string, code: string): Promise<Prepared> {
    if (Buffer.byteLength(code) > maxCodeBytes)
      throw new AppError("payload_too_large", "Component code is over 1 MB");
    if (code.trim() === "") throw invalidParameter("component_code", "component_code is empty");
    const built = await this.#builder.build(code, ownerId);
    return { built, meta: await this.#inspect(ownerId, built) };
  }

  async #inspect(ownerId: string, built: BuiltComponent): Promise<ComponentMeta> {
    let meta: ComponentMeta;
    try {
      meta = await this.#executor.inspect(ownerId, built);
    } catch (err) {
      const e = err as Error & { code?: string; data?: Record<string, unknown> };
      if (err instanceof AppError) throw err;
      throw new AppError("component_invalid", e.message, {
        details: { message: e.message, ...(e.data ?? {}) },
        cause: err,
      });
    }
    // The executor refuses one far over (its measure does not count escapes); this is the exact one.
    if (Buffer.byteLength(JSON.stringify(meta)) > maxDefinitionBytes) {
      throw new AppError("component_invalid", definitionTooLargeMessage(), {
        details: { limit_bytes: maxDefinitionBytes },
      });
    }
    return meta;
  }

  /** A component the caller may use: by ID among visible owners, or by key (own first, then the registry). */
  async resolve(visibleOwners: string[], idOrKey: string): Promise<ComponentRecord> {
    if (/^sc_[A-Za-z0-9]+$/.test(idOrKey)) {
      const c = await this.#store.getComponent(idOrKey);
      if (c && (visibleOwners.includes(c.ownerId) || c.ownerId === registryOwner)) return c;
      throw notFound("Component", idOrKey);
    }
    const c =
      (await this.#store.findComponentByKey(visibleOwners, idOrKey)) ??
      (await this.#store.findComponentByKey([registryOwner], idOrKey));
    if (!c) throw notFound("Component", idOrKey);
    return c;
  }

  /** The stored record of a component. */
  record(componentId: string): Promise<ComponentRecord> {
    const cached = this.#records.get(componentId);
    if (cached) return Promise.resolve(cached);
    return shared(this.#pendingRecords, componentId, async () => {
      const found = await this.#store.getComponent(componentId);
      if (!found) throw notFound("Component", componentId);
      this.#records.set(componentId, found);
      return found;
    });
  }

  /**
   * The stored record and its build for the executor of `ownerId` (whoever's process runs it: the
   * source's owner, not the component's), built into that owner's folder on first use after a start
   * (or after the cache let it go).
   */
  load(componentId: string, ownerId: string): Promise<Loaded> {
    const key = loadKey(componentId, ownerId);
    const cached = this.#builds.get(key);
    if (cached) return this.record(componentId).then((record) => ({ record, built: cached }));
    return shared(this.#pendingLoads, key, async () => {
      const record = await this.record(componentId);
      const built = await this.#builder.build(record.code, ownerId, record.dependencies);
      this.#builds.set(key, built);
      return { record, built };
    });
  }
}

/** `compute()`'s promise, shared with every call for `key` until it settles. */
function shared<T>(pending: Map<string, Promise<T>>, key: string, compute: () => Promise<T>): Promise<T> {
  let promise = pending.get(key);
  if (!promise) {
    promise = compute().finally(() => pending.delete(key));
    pending.set(key, promise);
  }
  return promise;
}

/** The bytes a component's row keeps, as the drivers fill its `stored_bytes`: code, definition, package versions. */
function storedBytes(record: ComponentRecord): number {
  return (
    Buffer.byteLength(record.code) +
    Buffer.byteLength(JSON.stringify(record.meta)) +
    Buffer.byteLength(JSON.stringify(record.dependencies))
  );
}

/** A saved component's size in memory, roughly: its code and definition dominate. */
function recordBytes(record: ComponentRecord): number {
  return record.code.length + JSON.stringify(record.meta).length + 1024;
}

function loadKey(componentId: string, ownerId: string): string {
  return `${componentId}\0${ownerId}`;
}
