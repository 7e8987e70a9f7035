/**
 * Runs a source's component through the executor and commits what the run produced: emits (ordered by
 * `ts`, deduped), db writes, dedupe state, `$logs`, `$errors` and usage — all in one transaction, or,
 * when the run failed, only its logs, its error and its usage. Invocations of one source run one at a
 * time, in call order, so each sees the db the previous one left.
 */
import type { FastifyBaseLogger } from "fastify";
import { BoundedCache } from "../../bounded-cache.ts";
import type { Clock } from "../../clock.ts";
import type { Config } from "../../config.ts";
import type { SecretBox } from "../../crypto/secret-box.ts";
import { endpointUrlOf } from "../../endpoint-origin.ts";
import { AppError, type SerializedError } from "../../errors.ts";
import { randomString } from "../../ids.ts";
import { withParsedBody } from "../../runtime/child/component/http-body.ts";
import type {
  ComponentMeta,
  EmittedEvent,
  Executor,
  HttpResponse,
  InvocationKind,
  InvokeRequest,
  InvokeResult,
  LogEntry,
} from "../../runtime/types.ts";
import { isStoreUnavailable } from "../../storage/health.ts";
import type { Storage, StorageOps } from "../../storage/port.ts";
import { planLimits, usageDay } from "../accounts/quotas.ts";
import type { Bus } from "../bus.ts";
import type { SourceLeases } from "../cluster/source-leases.ts";
import type { ComponentCatalog } from "../components/components.ts";
import { runtimeValue, sourceProps, storedDynamicProps, type TimerConfig } from "../components/props.ts";
import { normalizeChannelLoose } from "../events/channels.ts";
import type { Committer } from "../events/committer.ts";
import { applyDedupePerChannel, type ChannelDedupeState, orderByTs } from "../events/dedupe.ts";
import type { EventRecorder } from "../events/recorder.ts";
import type { EventRecord, SourceRecord } from "../types.ts";

export type Trigger = "http" | "timer" | "manual" | "subscription" | "hook" | "options";

export interface RunOutcome {
  ok: boolean;
  /** Stored emits of the default and named channels. */
  emits: EventRecord[];
  logs: LogEntry[];
  error?: SerializedError;
  response?: HttpResponse;
  returnValue?: unknown;
  durationMs: number;
  /** The component's HTTP interface holds the response (`customResponse`): a run that never responded gets 204. */
  customResponse: boolean;
}

export interface RunnerDeps {
  store: Storage;
  committer: Committer;
  recorder: EventRecorder;
  bus: Bus;
  executor: Executor;
  catalog: ComponentCatalog;
  secrets: SecretBox;
  clock: Clock;
  config: Config;
  logger: FastifyBaseLogger;
  /** With several nodes on the store: a source runs on the node holding its lease (source-leases.ts). */
  leases?: SourceLeases;
}

const platformVersion = "fount-0.1";

/** The event `run` sees (an endpoint event gets its parsed body). */
function eventOf(invocation: Extract<InvocationKind, { kind: "run" }>): unknown {
  return invocation.parseBody ? withParsedBody(invocation.event) : invocation.event;
}

/** The part of an executor request that depends only on the source row and its component. */
interface InvokeConfig extends Pick<InvokeRequest, "props" | "dbProps" | "httpProps" | "dynamicProps"> {
  meta: ComponentMeta;
  endpoint: string;
}

/** One invocation's place in its owner's daily quota, taken at the check. */
export interface QuotaHold {
  /** The check counted the invocation in its day's usage already: its commit adds the compute time only. */
  readonly counted: boolean;
  /** The invocation ended without a commit: a counted invocation is given back. */
  release(): void;
}

const noHold: QuotaHold = { counted: false, release: () => undefined };

/** What the PostgreSQL store raises when a commit's run lease moved on (migration 006, fount_assert_lease). */
const leaseLostSqlState = "FL001";

/** Named channels (besides the default, `$logs` and `$errors`) one source may emit on. */
export const maxCustomChannels = 32;

export class SourceRunner {
  readonly #d: RunnerDeps;
  /** Each source's db as its last finished invocation left it (the store has it too once committed). */
  readonly #db = new Map<string, { data: Record<string, unknown>; version: number }>();
  /**
   * The version a source's db had when its cache was dropped (a failed commit, another node took the
   * source, the source was deleted). The executor may hold that version or a later one, built on writes
   * that never landed: the db read back from the store gets a version above it, so the executor takes it.
   */
  readonly #dropped = new BoundedCache<string, number>(10_000);
  /** Per-source chain: the next invocation starts when the previous one has its result. */
  readonly #chains = new Map<string, Promise<unknown>>();
  /**
   * What the executor gets besides the invocation, per source row and component definition: rows read
   * through the source cache are the same frozen object until the source changes, so hits of one source
   * reuse one config (and the executor sends it once per batch). App props are never kept, because
   * their credentials can change without the source changing.
   */
  readonly #configs = new WeakMap<SourceRecord, InvokeConfig>();

  constructor(deps: RunnerDeps) {
    this.#d = deps;
  }

  /** The endpoint URL of a source's HTTP interface, on the endpoint origin (FOUNT_ENDPOINT_URL). */
  endpointUrl(source: SourceRecord): string | null {
    return source.endpointId ? endpointUrlOf(this.#d.config.endpointUrl, source.endpointId) : null;
  }

  /** Drops cached state of a deleted or replaced source, or of one another node ran since. */
  forget(sourceId: string): void {
    this.#drop(sourceId);
    this.#d.recorder.ids.forget(sourceId);
  }

  /** Drops the cached db, remembering its version (see `#dropped`). */
  #drop(sourceId: string): void {
    const version = this.#db.get(sourceId)?.version;
    this.#db.delete(sourceId);
    if (version !== undefined)
      this.#dropped.set(sourceId, Math.max(version, this.#dropped.get(sourceId) ?? 0));
  }

  /**
   * Throws `quota_exceeded` when the free account that created the source used up its day; otherwise
   * counts the invocation in the day's usage at once, in one statement of the store, so that hits
   * checked at the same time, on this node or any other, cannot all pass on the same count.
   */
  async checkQuota(source: SourceRecord): Promise<QuotaHold> {
    const user = await this.#d.store.getUser(source.createdBy);
    if (user?.plan !== "free") return noHold;
    const day = usageDay(this.#d.clock.now());
    const limits = planLimits(this.#d.config);
    const reserved = await this.#d.store.reserveInvocation(user.id, day, {
      invocations: limits.dailyInvocations,
      computeMs: limits.dailyComputeMs,
    });
    if (!reserved) {
      const tomorrow = new Date(day).getTime() + 86_400_000;
      throw new AppError(
        "quota_exceeded",
        "The daily invocation or compute-time quota of this account is used up",
        {
          headers: { "retry-after": String(Math.max(1, Math.ceil((tomorrow - this.#d.clock.now()) / 1000))) },
        },
      );
    }
    let released = false;
    return {
      counted: true,
      release: () => {
        if (released) return;
        released = true;
        this.#d.store.addUsage(user.id, day, { invocations: -1, computeMs: 0 }).catch((err) => {
          this.#d.logger.warn({ err, userId: user.id }, "could not give back an invocation that never ran");
        });
      },
    };
  }

  invoke(
    source: SourceRecord,
    invocation: InvocationKind,
    options: {
      trigger: Trigger;
      onRespond?: (r: HttpResponse) => void;
      timeoutMs?: number;
      /** From `checkQuota`: the invocation is counted already, and given back when it never commits. */
      hold?: QuotaHold;
      /**
       * Several nodes: it may run on another node instead (an endpoint hit), so it fails with
       * `LeaseMoved` rather than take back a lease this node is giving away (source-leases.ts).
       */
      movable?: boolean;
    } = {
      trigger: "manual",
    },
  ): Promise<RunOutcome> {
    // Only the hand-over to the executor is chained per source, so calls reach it in call order; the
    // executor runs them one at a time and lets each see the previous one's db writes, while the next
    // invocation is already queued (pipelining instead of one IPC round trip per invocation).
    const previous = this.#chains.get(source.id) ?? Promise.resolve();
    const started = this.#d.clock.now();
    const leases = invocation.kind === "options" ? undefined : this.#d.leases;
    /** The run lease's generation this invocation runs under (several nodes only). */
    let gen: number | undefined;
    /**
     * Its commit is coming: a batch of the committer may wait a moment for it (committer.ts). Told once
     * the commit is submitted, or never will be.
     */
    const arrived =
      invocation.kind !== "options" && invocation.kind !== "props" ? this.#d.committer.expect() : undefined;
    const submitted = previous
      .catch(() => undefined)
      .then(async () => {
        // Waits for this node to hold the source (several nodes); reads (`options`) need no lease.
        if (leases) gen = await leases.enter(source.id, options.movable);
        const { record, built } = await this.#d.catalog.load(source.componentId);
        if (invocation.kind === "run" && !record.meta.hasRun) {
          // A schedule source without run emits the event that triggered it.
          const result: InvokeResult = {
            emits: [{ event: eventOf(invocation), meta: {} }],
            logs: [],
            dbWrites: {},
            warnings: [],
            durationMs: 0,
          };
          return { record, result: Promise.resolve(result) };
        }
        const db = await this.#dbOf(source.id);
        const config = await this.#invokeConfig(record.meta, source);
        const result = this.#d.executor.invoke(
          {
            ownerId: source.ownerId,
            sourceId: source.id,
            component: built,
            props: config.props,
            dbProps: config.dbProps,
            httpProps: config.httpProps,
            ...(config.dynamicProps ? { dynamicProps: config.dynamicProps } : {}),
            db: db.data,
            dbVersion: db.version,
            invocation,
            timeoutMs: options.timeoutMs ?? this.#d.config.invocationTimeoutMs,
          },
          options.onRespond,
        );
        return { record, result };
      });
    const handedOver = submitted.then(
      () => undefined,
      () => undefined,
    );
    this.#chains.set(source.id, handedOver);
    void handedOver.then(() => {
      if (this.#chains.get(source.id) === handedOver) this.#chains.delete(source.id);
    });
    // Results of one source arrive in order, so db writes apply and commits queue in call order.
    const outcome = submitted.then(async ({ record, result }) => {
      const r = await result;
      const dbAfter = this.#applyDbWrites(source.id, r);
      const counted = options.hold?.counted ?? false;
      const committed = this.#commit(
        source,
        record.meta,
        invocation,
        options.trigger,
        r,
        dbAfter,
        started,
        gen,
        counted,
      );
      arrived?.();
      return committed;
    });
    // A run that failed before its commit was submitted is not waited for any longer.
    void outcome.catch(() => arrived?.());
    const hold = options.hold;
    // A run that resolved has committed its usage; one that failed to load or commit gives it back.
    if (hold) void outcome.catch(() => hold.release());
    if (leases) {
      const exit = () => {
        if (gen !== undefined) leases.exit(source.id);
      };
      void outcome.then(exit, exit);
    }
    return outcome;
  }

  async #dbOf(sourceId: string): Promise<{ data: Record<string, unknown>; version: number }> {
    let db = this.#db.get(sourceId);
    if (!db) {
      db = await this.#d.store.getSourceDb(sourceId);
      const dropped = this.#dropped.get(sourceId);
      if (dropped !== undefined) {
        db = { data: db.data, version: Math.max(db.version, dropped + 1) };
        this.#dropped.delete(sourceId);
      }
      this.#db.set(sourceId, db);
    }
    return db;
  }

  /**
   * Applies a successful run's db writes to the cache at once, so the next invocation sees them. Writes
   * that would take the db over its size limit fail the invocation instead (so a source's storage stays
   * bounded); the version then jumps by two, which makes the executor drop its copy and take ours.
   */
  #applyDbWrites(
    sourceId: string,
    result: InvokeResult,
  ): { data: Record<string, unknown>; version: number } | undefined {
    if (result.error || Object.keys(result.dbWrites).length === 0) return undefined;
    const current = this.#db.get(sourceId);
    if (!current) {
      // The cache was dropped while this run was out (an earlier commit failed, or the source moved):
      // its writes build on a db that never landed, and on an empty one they would replace the stored db.
      this.#dropped.set(sourceId, (this.#dropped.get(sourceId) ?? 0) + 1);
      result.error = {
        code: "db_stale",
        message:
          "An earlier invocation of this source failed to commit while this one ran; its db writes and emits were discarded",
      };
      return undefined;
    }
    const next = { data: { ...current.data, ...result.dbWrites }, version: current.version + 1 };
    for (const [k, v] of Object.entries(result.dbWrites)) if (v === undefined) delete next.data[k];
    const size = Buffer.byteLength(JSON.stringify(next.data));
    if (size > this.#d.config.maxDbBytes) {
      this.#db.set(sourceId, { data: current.data, version: current.version + 2 });
      result.error = {
        code: "db_too_large",
        message: `this.db would hold ${size} bytes, over the limit of ${this.#d.config.maxDbBytes}; the invocation's writes and emits were discarded`,
      };
      return undefined;
    }
    this.#db.set(sourceId, next);
    return next;
  }

  async #invokeConfig(meta: ComponentMeta, source: SourceRecord): Promise<InvokeConfig> {
    const endpoint = this.endpointUrl(source) ?? "";
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
        const account = ref ? await this.#d.store.getAppAccount(ref) : undefined;
        values[p.name] = {
          app: p.app ?? account?.app ?? p.name,
          $auth: account ? JSON.parse(this.#d.secrets.open(account.credentialsSealed)) : {},
        };
      } else if (p.type === "$.interface.timer") {
        const t = stored as TimerConfig | undefined;
        values[p.name] = {
          type: "$.interface.timer",
          interval_seconds: t?.intervalSeconds ?? null,
          cron: t?.cron ?? null,
        };
      } else if (stored !== undefined) {
        values[p.name] = runtimeValue(p, stored, this.#d.secrets);
      }
    }
    return values;
  }

  #commit(
    source: SourceRecord,
    meta: ComponentMeta,
    invocation: InvocationKind,
    trigger: Trigger,
    result: InvokeResult,
    dbAfter: { data: Record<string, unknown>; version: number } | undefined,
    startedMs: number,
    leaseGen: number | undefined,
    /** The quota check counted this invocation already (`QuotaHold.counted`). */
    counted = false,
  ): Promise<RunOutcome> {
    const stored: EventRecord[] = [];
    const outcome = (): RunOutcome => ({
      ok: !result.error,
      emits: stored.filter((e) => e.channel !== "$errors" && e.channel !== "$logs"),
      logs: result.logs,
      error: result.error,
      response: result.response,
      returnValue: result.returnValue,
      durationMs: result.durationMs,
      customResponse: meta.props.some((p) => p.type === "$.interface.http" && !!p.customResponse),
    });
    if (invocation.kind === "options" || invocation.kind === "props") return Promise.resolve(outcome());
    // Parsed only when an error is stored: most runs never need the original event again.
    const original = () => (invocation.kind === "run" ? eventOf(invocation) : { hook: invocation.hook });
    return this.#d.committer
      .submit(
        async (tx) => {
          stored.length = 0;
          if (leaseGen !== undefined && this.#d.leases)
            await tx.assertSourceLease(source.id, this.#d.leases.nodeId, leaseGen);
          const now = this.#d.clock.now();
          const put = async (channel: string, event: unknown, extra?: Record<string, unknown>) => {
            stored.push(
              await this.#d.recorder.store(tx, {
                emitterId: source.id,
                channel,
                event,
                meta: extra,
                nowMs: now,
              }),
            );
          };
          const error = (code: string, err: SerializedError) =>
            put("$errors", this.#errorEvent(source, original(), trigger, { ...err, code }, startedMs));
          for (const log of result.logs)
            await put("$logs", { level: log.level, message: log.message, ts: log.ts });
          for (const warning of result.warnings) await error(warning.code, warning);
          if (result.error) {
            await error(result.error.code, result.error);
          } else {
            await this.#storeEmits(tx, source, meta, result.emits, put, error);
            if (dbAfter) await tx.putSourceDb(source.id, dbAfter.data, dbAfter.version);
          }
          await tx.addUsage(source.createdBy, usageDay(now), {
            invocations: counted ? 0 : 1,
            computeMs: Math.ceil(result.durationMs),
          });
          return outcome();
        },
        () => {
          for (const e of stored) this.#d.bus.emit("event.stored", e);
          this.#d.bus.emit("invocation.finished", {
            sourceId: source.id,
            trigger,
            ok: !result.error,
            errorCode: result.error?.code,
            durationMs: result.durationMs,
          });
        },
      )
      .catch((err) => {
        if (isStoreUnavailable(err)) {
          // The store is out of reach (logged once by app.ts). The cached db is kept: the executor's copy
          // holds the same writes, and invocations already handed over build on it; dropping ours would
          // let their results land on an empty db. They reach the store with the next commit that writes the db.
          this.#d.logger.debug({ err, sourceId: source.id }, "commit of an invocation failed");
          throw err;
        }
        // The store refused the commit: the cached db and clock may hold writes that never landed.
        this.#drop(source.id);
        this.#d.recorder.ids.forget(source.id);
        if ((err as { code?: unknown }).code === leaseLostSqlState && leaseGen !== undefined) {
          this.#d.leases?.lost(source.id, leaseGen);
          this.#d.logger.warn(
            { sourceId: source.id },
            "a run was not stored: another node took the source over",
          );
          throw new AppError("lease_lost", undefined, { cause: err, headers: { "retry-after": "1" } });
        }
        this.#d.logger.error({ err, sourceId: source.id }, "commit of an invocation failed");
        throw err;
      });
  }

  async #storeEmits(
    tx: StorageOps,
    source: SourceRecord,
    meta: ComponentMeta,
    emits: EmittedEvent[],
    put: (channel: string, event: unknown, extra?: Record<string, unknown>) => Promise<void>,
    error: (code: string, err: SerializedError) => Promise<void>,
  ): Promise<void> {
    if (emits.length === 0) return;
    const ordered = await this.#withinChannelLimit(tx, source.id, orderByTs(emits), error);
    const state = meta.dedupe
      ? ((await tx.getDedupeState(source.id)) as ChannelDedupeState | undefined)
      : undefined;
    const outcome = applyDedupePerChannel(meta.dedupe, state ?? null, ordered);
    for (const refused of outcome.missingId) {
      await error("dedupe_missing_id", {
        code: "dedupe_missing_id",
        message: `An emit without a usable id was refused: the component uses dedupe "${meta.dedupe}", which needs meta.id on every emit`,
        data: { summary: refused.meta.summary },
      });
    }
    for (const e of outcome.accepted) {
      const extra: Record<string, unknown> = {};
      if (e.meta.id !== undefined) extra.id = e.meta.id;
      if (e.meta.summary !== undefined) extra.summary = e.meta.summary;
      if (e.meta.ts !== undefined) extra.ts = e.meta.ts;
      if (e.meta.delivery_ts !== undefined) extra.delivery_ts = e.meta.delivery_ts;
      await put(normalizeChannelLoose(e.meta.name), e.event, extra);
    }
    if (meta.dedupe) await tx.putDedupeState(source.id, outcome.state);
  }

  /**
   * Every channel keeps its last 100 events, so the number of channels bounds a source's events: emits
   * that would open more than `maxCustomChannels` named channels are refused on `$errors`.
   */
  async #withinChannelLimit(
    tx: StorageOps,
    sourceId: string,
    emits: EmittedEvent[],
    error: (code: string, err: SerializedError) => Promise<void>,
  ): Promise<EmittedEvent[]> {
    const named = new Set(emits.map((e) => normalizeChannelLoose(e.meta.name)).filter((c) => c !== ""));
    if (named.size === 0) return emits;
    const known = new Set((await tx.listChannels(sourceId)).filter((c) => c !== "" && !c.startsWith("$")));
    const refused = new Set<string>();
    for (const channel of named) {
      if (known.has(channel)) continue;
      if (known.size < maxCustomChannels) known.add(channel);
      else refused.add(channel);
    }
    if (refused.size === 0) return emits;
    await error("too_many_channels", {
      code: "too_many_channels",
      message: `Emits to ${[...refused].join(", ")} were refused: a source may use at most ${maxCustomChannels} named channels`,
    });
    return emits.filter((e) => !refused.has(normalizeChannelLoose(e.meta.name)));
  }

  #errorEvent(
    source: SourceRecord,
    original: unknown,
    trigger: Trigger,
    err: SerializedError,
    startedMs: number,
  ): unknown {
    const ts = new Date(this.#d.clock.now()).toISOString();
    return {
      original_event: original ?? null,
      original_context: {
        id: randomString(27),
        ts: new Date(startedMs).toISOString(),
        source_id: source.id,
        deployment_id: source.id,
        source_type: trigger,
        verified: false,
        owner_id: source.ownerId,
        platform_version: platformVersion,
      },
      error: {
        code: err.code,
        message: err.message,
        name: err.name,
        cellId: null,
        ts,
        stack: err.stack ?? null,
      },
    };
  }
}
