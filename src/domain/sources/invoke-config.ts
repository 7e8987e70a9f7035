/**
 * What the executor gets with each invocation besides the invocation itself, per source row and
 * component definition: prop values (app credentials opened, secrets unsealed), the db and HTTP props,
 * the dynamic props. Hits of one source reuse one such config, which the executor sends once per batch.
 */
import type { SecretBox } from "../../crypto/secret-box.ts";
import type { ComponentMeta, InvokeRequest } from "../../runtime/types.ts";
import type { Storage } from "../../storage/port.ts";
import { runtimeValue, sourceProps, storedDynamicProps, type TimerConfig } from "../components/props.ts";
import type { SourceRecord } from "../types.ts";

/** The part of an executor request that depends only on the source row and its component. */
export interface InvokeConfig
  extends Pick<InvokeRequest, "props" | "dbProps" | "httpProps" | "dynamicProps"> {
  meta: ComponentMeta;
  endpoint: string;
}

export class InvokeConfigs {
  readonly #store: Storage;
  readonly #secrets: SecretBox;
  /**
   * Rows read through the source cache are the same frozen object until the source changes, so a config
   * kept per row lasts as long as the source does. App props are never kept, because their credentials
   * can change without the source changing.
   */
  readonly #configs = new WeakMap<SourceRecord, InvokeConfig>();

  constructor(store: Storage, secrets: SecretBox) {
    this.#store = store;
    this.#secrets = secrets;
  }

  /** The config of the source's invocations with component `meta`; `endpoint`: its HTTP interface's URL, or "". */
  async of(meta: ComponentMeta, source: SourceRecord, endpoint: string): Promise<InvokeConfig> {
    const kept = this.#configs.get(source);
    if (kept && kept.meta === meta && kept.endpoint === endpoint) return kept;
    const dynamic = storedDynamicProps(source.props);
    const config: InvokeConfig = {
      meta,
      endpoint,
      props: await this.#propValues(meta, source),
      dbProps: meta.props.filter((p) => p.type === "$.service.db").map((p) => p.name),
      httpProps: meta.props
        .filter((p) => p.type === "$.interface.http")
        .map((p) => ({ name: p.name, endpoint, customResponse: !!p.customResponse })),
    };
    if (dynamic.length > 0) config.dynamicProps = dynamic.map((p) => ({ name: p.name, type: p.type }));
    if (!sourceProps(meta, source.props).some((p) => p.type === "app")) this.#configs.set(source, config);
    return config;
  }

  async #propValues(meta: ComponentMeta, source: SourceRecord): Promise<Record<string, unknown>> {
    const values: Record<string, unknown> = {};
    for (const p of sourceProps(meta, source.props)) {
      const stored = source.props[p.name];
      if (p.type === "app") {
        const ref = (stored as { authProvisionId?: string } | undefined)?.authProvisionId;
        const account = ref ? await this.#store.getAppAccount(ref) : undefined;
        values[p.name] = {
          app: p.app ?? account?.app ?? p.name,
          $auth: account ? JSON.parse(this.#secrets.open(account.credentialsSealed)) : {},
        };
      } else if (p.type === "$.interface.timer") {
        const t = stored as TimerConfig | undefined;
        values[p.name] = {
          type: "$.interface.timer",
          interval_seconds: t?.intervalSeconds ?? null,
          cron: t?.cron ?? null,
        };
      } else if (stored !== undefined) {
        values[p.name] = runtimeValue(p, stored, this.#secrets);
      }
    }
    return values;
  }
}
