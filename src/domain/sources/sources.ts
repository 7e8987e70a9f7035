/**
 * The source lifecycle of the spec's state table: create (deploy, then activate hooks), update
 * (deactivate, swap code and props, activate), enable/disable, delete (deactivate, then remove).
 */
import type { Clock } from "../../clock.ts";
import type { SecretBox } from "../../crypto/secret-box.ts";
import { AppError, invalidParameter, notFound } from "../../errors.ts";
import { newId, randomString } from "../../ids.ts";
import type { Storage, StorageOps } from "../../storage/port.ts";
import type { Bus } from "../bus.ts";
import type { ComponentCatalog } from "../components/components.ts";
import type { DynamicProps } from "../components/dynamic-props.ts";
import {
  assertDeployable,
  dynamicPropsKey,
  isSealed,
  storedDynamicProps,
  timerProps,
  validateProps,
} from "../components/props.ts";
import type { ComponentRecord, RetentionPolicy, SourceRecord, TimerRecord } from "../types.ts";
import type { SourceRunner } from "./runner.ts";
import { firstRun } from "./schedule.ts";

export interface ComponentChoice {
  componentId?: string;
  code?: string;
  url?: string;
  key?: string;
}

export interface SourceServiceDeps {
  store: Storage;
  catalog: ComponentCatalog;
  runner: SourceRunner;
  bus: Bus;
  secrets: SecretBox;
  clock: Clock;
  dynamicProps: DynamicProps;
}

export function slugify(name: string): string {
  const slug = name
    .normalize("NFKD")
    .replace(/[\u0300-\u036f]/g, "")
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "")
    .slice(0, 60);
  return slug || "source";
}

/**
 * The stored props to validate again when an update brings new code but no props: those the new code
 * still declares (a prop the new version dropped is not an error), less sealed secrets, which
 * `previous` keeps, as they are not values a prop definition accepts.
 */
function carriedProps(props: Record<string, unknown>, next: ComponentRecord): Record<string, unknown> {
  const declared = new Set(next.meta.props.map((p) => p.name));
  // Values of dynamic props too: whether they still exist is known once they are computed again.
  for (const p of storedDynamicProps(props)) declared.add(p.name);
  return Object.fromEntries(Object.entries(props).filter(([k, v]) => declared.has(k) && !isSealed(v)));
}

export class SourceService {
  readonly #d: SourceServiceDeps;

  constructor(deps: SourceServiceDeps) {
    this.#d = deps;
  }

  #now(): number {
    return Math.floor(this.#d.clock.now() / 1000);
  }

  /** Picks the component of a create or update: component_id, then code, then url, then key. */
  async chooseComponent(
    ownerId: string,
    visible: string[],
    choice: ComponentChoice,
  ): Promise<ComponentRecord> {
    const c = this.#d.catalog;
    if (choice.componentId) return c.resolve(visible, choice.componentId);
    if (choice.code !== undefined) return c.save(ownerId, { code: choice.code, url: choice.url });
    if (choice.url) return c.save(ownerId, { url: choice.url });
    if (choice.key) return c.resolve(visible, choice.key);
    throw invalidParameter("component_id", "Give one of component_id, component_code, component_url or key");
  }

  /**
   * Validates configured props and returns their stored form. A component with `additionalProps()`
   * gets its dynamic props computed from these values (the declared ones validated first), and the
   * values of those are validated too; their definitions are stored beside the values.
   */
  async #propsFor(
    component: ComponentRecord,
    ownerIds: string[],
    given: Record<string, unknown>,
    previous?: Record<string, unknown>,
    /** The values were carried over from the stored props: drop those of dynamic props that are gone. */
    carried = false,
  ): Promise<Record<string, unknown>> {
    assertDeployable(component.meta);
    const options = {
      previous,
      sealer: this.#d.secrets,
      appAccount: async (prop: string, id: string) => {
        const account = await this.#d.store.getAppAccount(id);
        if (!account || !ownerIds.includes(account.ownerId)) {
          throw new AppError("props_invalid", `No app account ${id}`, { details: { prop } });
        }
        return account.app;
      },
    };
    const declared = new Set(component.meta.props.map((p) => p.name));
    const own = Object.fromEntries(Object.entries(given).filter(([k]) => declared.has(k)));
    // Carried-over values of dynamic props the new code no longer has are dropped, not refused.
    if (!component.meta.additionalProps) return validateProps(component.meta, carried ? own : given, options);
    const validated = await validateProps(component.meta, own, options);
    const extra = Object.fromEntries(Object.entries(given).filter(([k]) => !declared.has(k)));
    const dynamic = await this.#d.dynamicProps.compute({
      ownerId: ownerIds[0]!,
      accountOwners: ownerIds,
      component,
      values: { ...validated, ...extra },
    });
    const names = new Set(dynamic.map((p) => p.name));
    const values = carried
      ? Object.fromEntries(Object.entries(given).filter(([k]) => declared.has(k) || names.has(k)))
      : given;
    const stored = await validateProps(component.meta, values, { ...options, dynamic });
    if (dynamic.length > 0) stored[dynamicPropsKey] = dynamic;
    return stored;
  }

  /** Run inside the transaction that stores the slug, so that concurrent deploys never pick the same one. */
  async #uniqueSlug(tx: StorageOps, ownerId: string, name: string, except?: string): Promise<string> {
    const base = slugify(name);
    const taken = new Set((await tx.listSlugs(ownerId, base)).filter((s) => s !== except));
    if (!taken.has(base)) return base;
    for (let i = 1; ; i++) if (!taken.has(`${base}-${i}`)) return `${base}-${i}`;
  }

  #timers(source: SourceRecord, component: ComponentRecord): TimerRecord[] {
    const now = this.#d.clock.now();
    return timerProps(component.meta, source.props).map(({ name, config }) => ({
      sourceId: source.id,
      propName: name,
      ...config,
      nextRunMs: firstRun(config, now),
    }));
  }

  /** Runs a lifecycle hook if the component has it; a throwing hook fails the operation with 422. */
  async #hook(
    source: SourceRecord,
    component: ComponentRecord,
    hook: "deploy" | "activate" | "deactivate",
  ): Promise<void> {
    if (!component.meta.hooks.includes(hook)) return;
    const outcome = await this.#d.runner.invoke(source, { kind: "hook", hook }, { trigger: "hook" });
    if (!outcome.ok) {
      throw new AppError(
        "hook_failed",
        `The ${hook} hook failed: ${outcome.error?.message ?? "unknown error"}`,
        {
          details: { hook, error: outcome.error?.code, message: outcome.error?.message },
        },
      );
    }
  }

  async create(input: {
    ownerId: string;
    createdBy: string;
    visibleOwners: string[];
    component: ComponentChoice;
    name?: string;
    configuredProps?: Record<string, unknown>;
    /** Its retention policy, checked against the instance's maximum (null: the defaults). */
    retention?: RetentionPolicy | null;
  }): Promise<SourceRecord> {
    const component = await this.chooseComponent(input.ownerId, input.visibleOwners, input.component);
    const props = await this.#propsFor(component, [input.ownerId], input.configuredProps ?? {});
    const now = this.#now();
    const name = input.name ?? component.name;
    const hasHttp = component.meta.props.some((p) => p.type === "$.interface.http");
    const source: SourceRecord = {
      id: newId("dc"),
      ownerId: input.ownerId,
      createdBy: input.createdBy,
      componentId: component.id,
      name,
      nameSlug: "",
      active: true,
      props,
      endpointId: hasHttp ? randomString(20).toLowerCase() : null,
      retention: input.retention ?? null,
      createdAt: now,
      updatedAt: now,
    };
    const { store } = this.#d;
    await store.transaction(async (tx) => {
      source.nameSlug = await this.#uniqueSlug(tx, input.ownerId, name);
      await tx.insertSource(source);
      // Auto-subscriptions made before this source now cover it.
      for (const rule of await tx.listAutoSubscriptions([source.ownerId])) {
        await tx.upsertSubscription({
          id: newId("sub"),
          ownerId: rule.ownerId,
          emitterId: source.id,
          listenerId: rule.listenerId,
          eventName: rule.eventName,
          createdAt: now,
        });
      }
    });
    try {
      await this.#hook(source, component, "deploy");
      await this.#hook(source, component, "activate");
    } catch (err) {
      await this.#remove(source);
      throw err;
    }
    await store.replaceTimers(source.id, this.#timers(source, component));
    return source;
  }

  async update(
    source: SourceRecord,
    input: {
      visibleOwners: string[];
      component?: ComponentChoice;
      name?: string;
      active?: boolean;
      configuredProps?: Record<string, unknown>;
      /** A new retention policy (null: back to the defaults); undefined keeps it. */
      retention?: RetentionPolicy | null;
    },
  ): Promise<SourceRecord> {
    const { store, catalog } = this.#d;
    const current = await catalog.record(source.componentId);
    const swapping = input.component !== undefined || input.configuredProps !== undefined;
    let next = current;
    let props = source.props;
    if (input.component)
      next = await this.chooseComponent(source.ownerId, input.visibleOwners, input.component);
    if (swapping) {
      props = await this.#propsFor(
        next,
        [source.ownerId],
        input.configuredProps ?? carriedProps(source.props, next),
        source.props,
        input.configuredProps === undefined,
      );
    }
    const active = input.active ?? source.active;
    if (swapping && source.active) await this.#hook(source, current, "deactivate");
    const hasHttp = next.meta.props.some((p) => p.type === "$.interface.http");
    const updated = await store.transaction(async (tx) =>
      tx.updateSource(source.id, {
        componentId: next.id,
        props,
        name: input.name,
        nameSlug:
          input.name !== undefined && input.name !== source.name
            ? await this.#uniqueSlug(tx, source.ownerId, input.name, source.nameSlug)
            : undefined,
        active,
        endpointId: hasHttp ? (source.endpointId ?? randomString(20).toLowerCase()) : null,
        retention: input.retention,
        updatedAt: this.#now(),
      }),
    );
    if (!updated) throw notFound("Source", source.id);
    if (swapping && active) await this.#hook(updated, next, "activate");
    // A rename keeps the timer's schedule; new code or props, or a re-activation, start a new one.
    if (swapping || active !== source.active) {
      await store.replaceTimers(source.id, active ? this.#timers(updated, next) : []);
    }
    return updated;
  }

  async delete(source: SourceRecord): Promise<void> {
    const component = await this.#d.catalog.record(source.componentId);
    if (source.active) {
      try {
        await this.#hook(source, component, "deactivate");
      } catch {
        // The error is on the source's $errors stream; deleting goes on, as a user asked for it.
      }
    }
    await this.#remove(source);
  }

  async #remove(source: SourceRecord): Promise<void> {
    await this.#d.store.transaction(async (tx) => {
      await tx.deleteSource(source.id);
      await tx.deleteSubscriptionsOf(source.id);
    });
    this.#d.runner.forget(source.id);
    this.#d.bus.emit("source.deleted", { sourceId: source.id });
  }
}
