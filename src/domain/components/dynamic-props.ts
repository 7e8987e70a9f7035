/**
 * Dynamic props: a component's `additionalProps(previousPropDefs)` runs in its owner's sandbox with
 * `this` holding the configured props (app props with their account's `$auth`), and the props it
 * returns join the component's own. The reload route shows them; deploy and update compute them again
 * from the values they are given and validate those values against them.
 */
import type { Config } from "../../config.ts";
import type { SecretBox } from "../../crypto/secret-box.ts";
import { AppError } from "../../errors.ts";
import type { DynamicPropRef, Executor, PropMeta } from "../../runtime/types.ts";
import type { Storage } from "../../storage/port.ts";
import type { ComponentRecord } from "../types.ts";
import type { ComponentCatalog } from "./components.ts";
import { runtimeValue } from "./props.ts";
import { isSealed } from "./sealed-values.ts";

export interface DynamicPropsDeps {
  store: Storage;
  executor: Executor;
  catalog: ComponentCatalog;
  secrets: SecretBox;
  config: Config;
}

type Values = Record<string, unknown>;

function accountRef(value: unknown): string | undefined {
  if (!value || typeof value !== "object" || Array.isArray(value)) return undefined;
  const ref = (value as { authProvisionId?: unknown }).authProvisionId;
  return typeof ref === "string" ? ref : undefined;
}

export class DynamicProps {
  readonly #d: DynamicPropsDeps;

  constructor(deps: DynamicPropsDeps) {
    this.#d = deps;
  }

  /**
   * The dynamic props of `component` for the configured `values` (stored or raw form): none when it
   * has no `additionalProps()`. An `additionalProps()` that throws, or returns props that do not
   * validate, fails with 422 `component_invalid` and its message.
   */
  async compute(input: {
    ownerId: string;
    /** Owners whose app accounts the values may name. */
    accountOwners: string[];
    component: ComponentRecord;
    values: Values;
  }): Promise<PropMeta[]> {
    const { component } = input;
    if (!component.meta.additionalProps) return [];
    const { props, refs } = await this.#thisValues(component, input.values, input.accountOwners);
    const { built } = await this.#d.catalog.load(component.id, input.ownerId);
    const result = await this.#d.executor.invoke({
      ownerId: input.ownerId,
      // The realm the component's options calls use: no source exists (yet) to run it in.
      sourceId: `options_${component.id}`,
      component: built,
      props,
      dbProps: [],
      httpProps: [],
      dynamicProps: refs,
      db: {},
      dbVersion: 0,
      invocation: { kind: "props" },
      timeoutMs: this.#d.config.invocationTimeoutMs,
    });
    if (result.error) {
      const { code, message } = result.error;
      throw new AppError("component_invalid", `additionalProps() failed: ${message}`, {
        details: { code, message },
      });
    }
    return Array.isArray(result.returnValue) ? (result.returnValue as PropMeta[]) : [];
  }

  /**
   * `this` of the call: the values with secrets opened and account references replaced by the app and
   * its `$auth`. Values of props the component does not declare (dynamic props configured after an
   * earlier reload) are passed too, typed for the runtime: `app` for account references, else `any`.
   */
  async #thisValues(
    component: ComponentRecord,
    values: Values,
    owners: string[],
  ): Promise<{ props: Values; refs: DynamicPropRef[] }> {
    const declared = new Map(component.meta.props.map((p) => [p.name, p]));
    const props: Values = {};
    const refs: DynamicPropRef[] = [];
    for (const [name, value] of Object.entries(values)) {
      const p = declared.get(name);
      if (p && (p.type === "$.interface.http" || p.type === "$.service.db")) continue;
      const ref = accountRef(value);
      if (ref && (!p || p.type === "app")) {
        const account = await this.#d.store.getAppAccount(ref);
        if (!account || !owners.includes(account.ownerId)) {
          throw new AppError("props_invalid", `No app account ${ref}`, { details: { prop: name } });
        }
        props[name] = {
          app: p?.app ?? account.app,
          $auth: JSON.parse(this.#d.secrets.open(account.credentialsSealed)),
        };
        if (!p) refs.push({ name, type: "app" });
        continue;
      }
      props[name] = p
        ? runtimeValue(p, value, this.#d.secrets)
        : isSealed(value)
          ? this.#d.secrets.open(value.$sealed)
          : value;
      if (!p) refs.push({ name, type: "any" });
    }
    return { props, refs };
  }
}
