/**
 * Runs a source's component through the executor and commits what the run produced: emits (ordered by
 * `ts`, deduped), db writes, dedupe state, `$logs`, `$errors` and usage — all in one transaction, or,
 * when the run failed, only its logs, its error and its usage. Invocations of one source run one at a
 * time, in call order, so each sees the db the previous one left.
 *
 * `invoke` is the sequence of one invocation; each step is a module of its own: the run lease
 * (run-lease.ts), the quota hold (quota-hold.ts), the per-source chain to the executor (source-chain.ts,
 * with invoke-config.ts), the db writes (source-db.ts) and the commit (run-commit.ts, stored-emits.ts).
 */
import type { FastifyBaseLogger } from "fastify";
import type { Clock } from "../../clock.ts";
import type { Config } from "../../config.ts";
import type { SecretBox } from "../../crypto/secret-box.ts";
import { endpointUrlOf } from "../../endpoint-origin.ts";
import { clientLeft } from "../../errors.ts";
import type { Executor, HttpResponse, InvocationKind, InvokeResult } from "../../runtime/types.ts";
import type { Storage } from "../../storage/port.ts";
import { type SpanContext, tracing } from "../../tracing.ts";
import type { Bus } from "../bus.ts";
import type { SourceLeases } from "../cluster/source-leases.ts";
import type { ComponentCatalog } from "../components/components.ts";
import type { Committer } from "../events/committer.ts";
import type { EventRecorder } from "../events/recorder.ts";
import type { ComponentRecord, SourceRecord } from "../types.ts";
import { InvokeConfigs } from "./invoke-config.ts";
import { holdQuota, type QuotaHold } from "./quota-hold.ts";
import { eventOf, RunCommits, type RunOutcome, type Trigger } from "./run-commit.ts";
import { runLeases } from "./run-lease.ts";
import { endRunSpan, startRunSpan } from "./run-span.ts";
import { HitBacklog, SourceChain } from "./source-chain.ts";
import { type SourceDb, SourceDbs } from "./source-db.ts";

export type { QuotaHold } from "./quota-hold.ts";
export type { RunOutcome, Trigger } from "./run-commit.ts";

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

/** How one invocation is run. */
export interface InvokeOptions {
  trigger: Trigger;
  onRespond?: (r: HttpResponse) => void;
  timeoutMs?: number;
  /** From `checkQuota`: the invocation is counted already, and given back when it never commits. */
  hold?: QuotaHold;
  /**
   * Instead of `hold`, for a `movable` hit: `checkQuota`, called once this node holds the source's lease,
   * so that a hit that goes to another node never counts here (its count, taken and given back while it
   * waited, made hits checked meanwhile on any node find the day used up).
   */
  quota?: () => Promise<QuotaHold>;
  /**
   * Several nodes: it may run on another node instead (an endpoint hit), so it fails with
   * `LeaseMoved` rather than take back a lease this node is giving away (source-leases.ts).
   */
  movable?: boolean;
  /** With traces on: the span of what triggered it (an endpoint hit, a delivery attempt), the run's span's parent. */
  trace?: SpanContext | undefined;
  /** From `quotaOf`: an endpoint hit's place in its source's backlog (`HitBacklog`), given back once it settled. */
  leave?: () => void;
  /** Aborted: the invocation is dropped while it has not started (an endpoint hit whose client went away). */
  signal?: AbortSignal | undefined;
}

/** A run handed to the executor: its component, and its result to come. */
interface HandedOver {
  record: ComponentRecord;
  result: Promise<InvokeResult>;
}

export class SourceRunner {
  readonly #d: RunnerDeps;
  readonly #chain = new SourceChain();
  readonly #backlog: HitBacklog;
  readonly #dbs: SourceDbs;
  readonly #configs: InvokeConfigs;
  readonly #commits: RunCommits;

  constructor(deps: RunnerDeps) {
    this.#d = deps;
    this.#dbs = new SourceDbs(deps.store, deps.config);
    this.#configs = new InvokeConfigs(deps.store, deps.secrets);
    this.#commits = new RunCommits({ ...deps, dbs: this.#dbs });
    this.#backlog = new HitBacklog(deps.config);
  }

  /** The endpoint URL of a source's HTTP interface, on the endpoint origin (FOUNT_ENDPOINT_URL). */
  endpointUrl(source: SourceRecord): string | null {
    return source.endpointId ? endpointUrlOf(this.#d.config.endpointUrl, source.endpointId) : null;
  }

  /** Bytes of the sources' dbs kept in memory (at most FOUNT_DB_CACHE_BYTES, but for those in use). */
  get dbCacheBytes(): number {
    return this.#dbs.cachedBytes;
  }

  /** Drops cached state of a deleted or replaced source, or of one another node ran since. */
  forget(sourceId: string): void {
    this.#dbs.drop(sourceId);
    this.#d.recorder.ids.forget(sourceId);
  }

  /**
   * Throws `quota_exceeded` when the free account that created the source used up its day; otherwise
   * holds the invocation's place in the day's usage (quota-hold.ts), to pass to `invoke`.
   */
  checkQuota(source: SourceRecord): Promise<QuotaHold> {
    return holdQuota(this.#d, source);
  }

  /**
   * An endpoint hit's quota for `invoke`: checked now (`hold`), or, for a hit that may move to another
   * node, once this node holds the source's lease (`quota`), so that it counts only where it runs. Not
   * in the source's chain otherwise: on SQLite each check waits for the store's lock, which would hold
   * the source's next hits. Before it, the hit of `bytes` takes its place in the source's backlog
   * (`leave`), or is refused with 429 `rate_limited` when the source has no room (`HitBacklog`).
   */
  async quotaOf(
    source: SourceRecord,
    movable: boolean,
    bytes: number,
  ): Promise<Pick<InvokeOptions, "hold" | "quota" | "leave">> {
    // Its place in the source's backlog comes first: a hit the source has no room for costs no store write.
    const leave = this.#backlog.admit(source.id, bytes);
    try {
      return movable
        ? { quota: () => this.checkQuota(source), leave }
        : { hold: await this.checkQuota(source), leave };
    } catch (err) {
      leave();
      throw err;
    }
  }

  invoke(
    source: SourceRecord,
    invocation: InvocationKind,
    options: InvokeOptions = { trigger: "manual" },
  ): Promise<RunOutcome> {
    const { signal, leave } = options;
    const started = this.#d.clock.now();
    const leases = runLeases(this.#d.leases, invocation);
    /** The run lease's generation this invocation runs under (several nodes only). */
    let gen: number | undefined;
    /**
     * Its commit is coming: a batch of the committer may wait a moment for it (committer.ts). Told once
     * the commit is submitted, or never will be.
     */
    const commits = invocation.kind !== "options" && invocation.kind !== "props";
    const arrived = commits ? this.#d.committer.expect() : undefined;
    // Runs that commit are traced, from here to their commit's end.
    const span = tracing.on && commits ? startRunSpan(source.id, options.trigger, options.trace) : undefined;
    // Take the lease, then hand over to the executor: chained per source, so calls reach it in call order.
    let hold = options.hold;
    /** The db this invocation was given, held in the runner's cache until its commit settles. */
    let db: SourceDb | undefined;
    const submitted = this.#chain.next(source.id, async (): Promise<HandedOver> => {
      // Waits for this node to hold the source (several nodes); reads (`options`) need no lease.
      if (leases) gen = await leases.enter(source.id, options.movable);
      if (options.quota) hold = await options.quota();
      const { record, built } = await this.#d.catalog.load(source.componentId, source.ownerId);
      // A schedule source without run emits the event that triggered it.
      if (invocation.kind === "run" && !record.meta.hasRun) return { record, result: emitOnly(invocation) };
      db = await this.#dbs.of(source.id);
      const config = await this.#configs.of(record.meta, source, this.endpointUrl(source) ?? "");
      // Nothing ran yet: a hit whose client went away meanwhile is dropped (the executor drops it too
      // while it waits in the source's queue there).
      if (signal?.aborted) throw clientLeft();
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
          signal,
        },
        options.onRespond,
      );
      // The executor fails a call it dropped with `clientLeft` too. The result is handed on as it is:
      // results of one source reach their commits in the order they came only if each takes as many
      // steps (a wrapper on hits with a client signal let a forwarded hit's commit overtake a local
      // one's, which stored a counter's 249 before its 248).
      return { record, result };
    });
    // Apply the db writes, then commit: results of one source arrive in order, so db writes apply and
    // commits queue in call order.
    const outcome = submitted.then(async ({ record, result }) => {
      const r = await result;
      const dbAfter = this.#dbs.apply(source.id, r);
      // The executor pool may let go of the writes it kept for requests made before this one applied.
      const version = this.#dbs.versionOf(source.id);
      if (version !== undefined) this.#d.executor.applied?.(source.ownerId, source.id, version);
      const committed = this.#commits.commit(
        source,
        record.meta,
        invocation,
        options.trigger,
        r,
        dbAfter,
        started,
        gen,
        hold?.counted ?? false,
        span,
      );
      arrived?.();
      return committed;
    });
    // A run that failed before its commit was submitted is not waited for any longer.
    void outcome.catch(() => arrived?.());
    if (span)
      void outcome.then(
        (o) => endRunSpan(span, o.error),
        (err) => endRunSpan(span, err),
      );
    // A run that resolved has committed its usage; one that failed to load or commit gives it back.
    void outcome.catch(() => hold?.release());
    const releaseDb = () => {
      if (db) this.#dbs.release(source.id, db);
    };
    void outcome.then(releaseDb, releaseDb);
    if (leave) void outcome.then(leave, leave);
    if (leases) {
      const exit = () => {
        if (gen !== undefined) leases.exit(source.id);
      };
      void outcome.then(exit, exit);
    }
    return outcome;
  }
}

/** The result of a run without `run`: the triggering event, emitted as it came. */
function emitOnly(invocation: Extract<InvocationKind, { kind: "run" }>): Promise<InvokeResult> {
  return Promise.resolve({
    emits: [{ event: eventOf(invocation), meta: {} }],
    logs: [],
    dbWrites: {},
    warnings: [],
    durationMs: 0,
  });
}
